#include "core/store/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <charconv>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

constexpr size_t kScanCount = 500;  // SCAN COUNT hint
constexpr size_t kMgetBatch = 256;  // keys per MGET

// Deletes the lease key only while it still holds our owner id.
constexpr char kReleaseScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

// This Abseil's string_view is its own type, not std::string_view.
absl::string_view Av(std::string_view text) { return absl::string_view(text.data(), text.size()); }

// hiredis writes with write(2): a peer that closed the socket raises SIGPIPE, which would kill
// the process. This blocks SIGPIPE for the calling thread and swallows one raised meanwhile.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~ScopedSigpipeBlock() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero = {0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

// Maps an error reply ("ERR ...", "WRONGTYPE ...") to a status.
absl::Status ErrorReplyStatus(std::string_view where, std::string_view message) {
  const std::string text = absl::StrCat("redis ", Av(where), ": ", Av(message));
  for (std::string_view transient : {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"}) {
    if (message.starts_with(transient)) return absl::UnavailableError(text);
  }
  if (message.starts_with("WRONGTYPE")) return absl::DataLossError(text);
  if (message.starts_with("NOAUTH") || message.starts_with("WRONGPASS")) {
    return absl::PermissionDeniedError(text);
  }
  return absl::InternalError(text);
}

// Escapes the glob characters of SCAN MATCH.
std::string GlobEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string DefaultOwnerId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::random_device random;
  const uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
  return absl::StrFormat("%s:%d:%016x", host, getpid(), nonce);
}

bool ParseInt(std::string_view text, int* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

std::string ReplyText(const redisReply* reply) { return std::string(reply->str, reply->len); }

}  // namespace

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url) {
  const auto bad = [url](std::string_view why) {
    std::string shown(url);  // without the password
    if (size_t at = shown.rfind('@'); at != std::string::npos) shown.replace(0, at, "redis://***");
    return absl::InvalidArgumentError(absl::StrCat(
        "redis url '", shown, "': ", Av(why), "; expected redis://[:password@]host[:port][/db]"));
  };
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) return bad("wrong scheme");
  std::string_view rest = url.substr(kScheme.size());
  RedisStoreOptions options;
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    if (userinfo.size() < 2 || userinfo[0] != ':') return bad("expected ':password@'");
    options.password = std::string(userinfo.substr(1));
    rest = rest.substr(at + 1);
  }
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!ParseInt(db, &options.db) || options.db < 0)) return bad("bad db number");
  }
  std::string_view port;
  if (hostport.starts_with('[')) {  // [ipv6]:port
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    options.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty() && after[0] != ':') return bad("junk after ']'");
    if (!after.empty()) port = after.substr(1);
  } else {
    const size_t colon = hostport.find(':');
    options.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
    if (port.find(':') != std::string_view::npos) return bad("put an IPv6 host in brackets");
  }
  if (options.host.empty()) return bad("missing host");
  if (!port.empty() || hostport.ends_with(':')) {
    if (!ParseInt(port, &options.port) || options.port < 1 || options.port > 65535) {
      return bad("bad port");
    }
  }
  return options;
}

absl::StatusOr<StoredConfig> DecodeRedisGet(const redisReply& reply, std::string_view location,
                                            std::string_view key) {
  if (reply.type == REDIS_REPLY_NIL) {
    return absl::NotFoundError(absl::StrCat("redis ", Av(location), ": no key '", Av(key), "'"));
  }
  if (reply.type != REDIS_REPLY_STRING) {
    return absl::DataLossError(
        absl::StrCat("redis ", Av(location), ": key '", Av(key), "' does not hold a string"));
  }
  absl::StatusOr<StoredConfig> value = StoredConfig::FromJson(ReplyText(&reply));
  if (absl::IsNotFound(value.status())) {  // a config of another config schema: a miss
    return absl::NotFoundError(absl::StrCat("redis ", Av(location), ": key '", Av(key),
                                            "': ", value.status().message()));
  }
  if (!value.ok()) {
    return absl::DataLossError(absl::StrCat("redis ", Av(location), ": key '", Av(key),
                                            "' does not decode: ", value.status().message()));
  }
  return value;
}

absl::Status DecodeRedisScan(const redisReply& reply, std::string_view location,
                             std::string* cursor, std::set<std::string>* keys) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 ||
      reply.element[0]->type != REDIS_REPLY_STRING || reply.element[1]->type != REDIS_REPLY_ARRAY) {
    return absl::InternalError(absl::StrCat("redis ", Av(location), ": malformed SCAN reply"));
  }
  *cursor = ReplyText(reply.element[0]);
  const redisReply* batch = reply.element[1];
  for (size_t i = 0; i < batch->elements; ++i) {
    if (batch->element[i]->type == REDIS_REPLY_STRING) keys->insert(ReplyText(batch->element[i]));
  }
  return absl::OkStatus();
}

absl::Status DecodeRedisMget(const redisReply& reply, std::string_view location, size_t count,
                             std::string_view kernel_prefix, std::vector<StoredConfig>* out) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != count) {
    return absl::InternalError(absl::StrCat("redis ", Av(location), ": malformed MGET reply"));
  }
  for (size_t i = 0; i < reply.elements; ++i) {
    if (reply.element[i]->type != REDIS_REPLY_STRING) continue;  // deleted meanwhile
    absl::StatusOr<StoredConfig> value = StoredConfig::FromJson(ReplyText(reply.element[i]));
    if (value.ok() && value->kernel_id.starts_with(kernel_prefix)) {
      out->push_back(*std::move(value));
    }
  }
  return absl::OkStatus();
}

void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {}

RedisStore::~RedisStore() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) redisFree(context_);
}

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Connect(RedisStoreOptions options) {
  const auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("redis store options: ", Av(what)));
  };
  if (options.host.empty()) return bad("host must not be empty");
  if (options.port < 1 || options.port > 65535) {
    return bad(absl::StrCat("port must be in [1, 65535], got ", options.port));
  }
  if (options.db < 0) return bad(absl::StrCat("db must be >= 0, got ", options.db));
  if (options.connect_timeout <= absl::ZeroDuration() ||
      options.command_timeout <= absl::ZeroDuration()) {
    return bad("connect_timeout and command_timeout must be positive");
  }
  if (options.reconnect_backoff < absl::ZeroDuration()) {
    return bad("reconnect_backoff must not be negative");
  }
  if (options.key_prefix.empty() || options.lease_prefix.empty() ||
      options.key_prefix == options.lease_prefix) {
    return bad("key_prefix and lease_prefix must be non-empty and differ");
  }
  if (options.owner_id.empty()) options.owner_id = DefaultOwnerId();
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(options)));
}

std::string RedisStore::location() const {
  const bool ipv6 = options_.host.find(':') != std::string::npos;
  return absl::StrCat("redis://", ipv6 ? "[" : "", options_.host, ipv6 ? "]" : "", ":",
                      options_.port, "/", options_.db);
}

std::string RedisStore::ConfigKey(const std::string& fingerprint_hash,
                                  const std::string& cache_key) const {
  return absl::StrCat(options_.key_prefix, fingerprint_hash, ":", cache_key);
}

void RedisStore::DropConnectionLocked(std::string error) {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  last_error_ = std::move(error);
  next_connect_ = absl::Now() + options_.reconnect_backoff;
}

absl::Status RedisStore::EnsureConnectedLocked() {
  if (context_ != nullptr) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now < next_connect_) {
    return absl::UnavailableError(absl::StrCat("redis ", location(), " unavailable (", last_error_,
                                               "); next connection attempt in ",
                                               absl::FormatDuration(next_connect_ - now)));
  }
  ScopedSigpipeBlock no_sigpipe;
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                            absl::ToTimeval(options_.connect_timeout));
  if (c == nullptr || c->err != 0) {
    std::string error = c == nullptr ? "cannot allocate a connection" : c->errstr;
    if (c != nullptr) redisFree(c);
    DropConnectionLocked(absl::StrCat("connect: ", error));
    return absl::UnavailableError(absl::StrCat("redis ", location(), ": cannot connect: ", error));
  }
  if (redisSetTimeout(c, absl::ToTimeval(options_.command_timeout)) != REDIS_OK) {
    redisFree(c);
    DropConnectionLocked("cannot set the command timeout");
    return absl::UnavailableError(absl::StrCat("redis ", location(), ": cannot set timeout"));
  }
  context_ = c;
  std::vector<std::vector<std::string>> setup;
  if (!options_.password.empty()) setup.push_back({"AUTH", options_.password});
  if (options_.db != 0) setup.push_back({"SELECT", std::to_string(options_.db)});
  for (const auto& command : setup) {
    absl::StatusOr<Reply> reply = CommandLocked(command);
    if (!reply.ok()) {
      DropConnectionLocked(absl::StrCat(command[0], ": ", reply.status().message()));
      return reply.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisStore::Reply> RedisStore::CommandLocked(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  ScopedSigpipeBlock no_sigpipe;
  Reply reply(static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data())));
  if (reply == nullptr) {
    std::string error = context_->errstr;
    DropConnectionLocked(absl::StrCat(args[0], ": ", error));
    return absl::UnavailableError(
        absl::StrCat("redis ", location(), ": ", args[0], " failed: ", error));
  }
  if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(location(), ReplyText(reply.get()));
  return reply;
}

absl::StatusOr<RedisStore::Reply> RedisStore::Command(const std::vector<std::string>& args) {
  absl::MutexLock lock(&mu_);
  KS_RETURN_IF_ERROR(EnsureConnectedLocked());
  return CommandLocked(args);
}

absl::Status RedisStore::Ping() {
  KS_ASSIGN_OR_RETURN(Reply reply, Command({"PING"}));
  if (reply->type == REDIS_REPLY_STATUS && ReplyText(reply.get()) == "PONG") {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("redis ", location(), ": unexpected PING reply"));
}

absl::StatusOr<StoredConfig> RedisStore::Get(const std::string& fingerprint_hash,
                                             const std::string& cache_key) {
  const std::string key = ConfigKey(fingerprint_hash, cache_key);
  KS_ASSIGN_OR_RETURN(Reply reply, Command({"GET", key}));
  return DecodeRedisGet(*reply, location(), key);
}

absl::Status RedisStore::Put(const StoredConfig& value) {
  KS_ASSIGN_OR_RETURN(
      Reply reply,
      Command({"SET", ConfigKey(value.fingerprint_hash, value.cache_key), value.ToJson()}));
  return absl::OkStatus();
}

absl::Status RedisStore::Delete(const std::string& fingerprint_hash, const std::string& cache_key) {
  const std::string key = ConfigKey(fingerprint_hash, cache_key);
  KS_ASSIGN_OR_RETURN(Reply reply, Command({"DEL", key}));
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) {
    return absl::NotFoundError(absl::StrCat("redis ", location(), ": no key '", key, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredConfig>> RedisStore::List(std::string_view kernel_prefix) {
  // Keys are <prefix><fingerprint>:<kernel id>:<hash>; the pattern only narrows the scan, the
  // decoded kernel id decides.
  std::string pattern = GlobEscape(options_.key_prefix) + "*";
  if (!kernel_prefix.empty()) pattern += ":" + GlobEscape(kernel_prefix) + "*";
  std::set<std::string> keys;  // SCAN may return a key more than once
  std::string cursor = "0";
  do {
    KS_ASSIGN_OR_RETURN(Reply reply, Command({"SCAN", cursor, "MATCH", pattern, "COUNT",
                                              std::to_string(kScanCount)}));
    KS_RETURN_IF_ERROR(DecodeRedisScan(*reply, location(), &cursor, &keys));
  } while (cursor != "0");

  std::vector<StoredConfig> out;
  std::vector<std::string> batch;
  for (auto it = keys.begin(); it != keys.end();) {
    batch.clear();
    for (; it != keys.end() && batch.size() < kMgetBatch; ++it) batch.push_back(*it);
    KS_RETURN_IF_ERROR(FetchMatching(batch, kernel_prefix, &out));
  }
  return out;
}

absl::Status RedisStore::FetchMatching(const std::vector<std::string>& keys,
                                       std::string_view kernel_prefix,
                                       std::vector<StoredConfig>* out) {
  std::vector<std::string> args = {"MGET"};
  args.insert(args.end(), keys.begin(), keys.end());
  KS_ASSIGN_OR_RETURN(Reply reply, Command(args));
  return DecodeRedisMget(*reply, location(), keys.size(), kernel_prefix, out);
}

absl::StatusOr<bool> RedisStore::TryAcquireLease(const std::string& fingerprint_hash,
                                                 const std::string& cache_key, absl::Duration ttl) {
  const int64_t ttl_ms = absl::ToInt64Milliseconds(ttl);
  if (ttl_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl: expected at least 1ms, got ", absl::FormatDuration(ttl)));
  }
  const std::string key = absl::StrCat(options_.lease_prefix, fingerprint_hash, ":", cache_key);
  KS_ASSIGN_OR_RETURN(Reply reply,
                      Command({"SET", key, options_.owner_id, "NX", "PX", std::to_string(ttl_ms)}));
  return reply->type == REDIS_REPLY_STATUS && ReplyText(reply.get()) == "OK";
}

absl::Status RedisStore::ReleaseLease(const std::string& fingerprint_hash,
                                      const std::string& cache_key) {
  const std::string key = absl::StrCat(options_.lease_prefix, fingerprint_hash, ":", cache_key);
  KS_ASSIGN_OR_RETURN(Reply reply, Command({"EVAL", kReleaseScript, "1", key, options_.owner_id}));
  return absl::OkStatus();
}

}  // namespace kernelserve
