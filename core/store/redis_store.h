// RedisStore: the persistent tier shared by every replica, kept in Redis.
#ifndef KERNELSERVE_CORE_STORE_REDIS_STORE_H_
#define KERNELSERVE_CORE_STORE_REDIS_STORE_H_

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/store/persistent_store.h"

struct redisContext;  // hiredis
struct redisReply;

namespace kernelserve {

struct RedisStoreOptions {
  // Server address (host name or IP).
  std::string host = "127.0.0.1";
  // Server port.
  int port = 6379;
  // Logical database (SELECT) used after connecting.
  int db = 0;
  // Sent with AUTH after connecting; "" = no AUTH.
  std::string password;
  // Limit on establishing a connection.
  absl::Duration connect_timeout = absl::Milliseconds(200);
  // Limit on each command's round trip; a command that takes longer fails with Unavailable.
  absl::Duration command_timeout = absl::Milliseconds(200);
  // Configs live at <key_prefix><fingerprint hash>:<cache key>.
  std::string key_prefix = "kernelserve:v1:cfg:";
  // Tuning leases live at <lease_prefix><fingerprint hash>:<cache key>.
  std::string lease_prefix = "kernelserve:v1:lease:";
  // After a connection or I/O error no new connection is tried for this long; calls meanwhile
  // answer Unavailable at once, so requests never wait on a dead Redis.
  absl::Duration reconnect_backoff = absl::Seconds(1);
  // The value written into leases this store holds; "" = "<host name>:<pid>:<random hex>".
  std::string owner_id;
};

// Parses "redis://[:password@]host[:port][/db]" (port defaults to 6379, db to 0; an IPv6 host
// goes in brackets). InvalidArgument naming the expected form otherwise.
absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url);

// Decoders of the replies RedisStore reads: pure functions of a hiredis reply, so that tests
// and the store_fuzz harness can feed them any reply. `location` names the server in errors.
//
// A GET of `key`: NotFound for nil; DataLoss for anything but a string that decodes.
absl::StatusOr<StoredConfig> DecodeRedisGet(const redisReply& reply, std::string_view location,
                                            std::string_view key);
// A SCAN: sets `cursor` to the next cursor and adds the string keys to `keys`. Internal when
// the reply is not [cursor, [keys...]].
absl::Status DecodeRedisScan(const redisReply& reply, std::string_view location,
                             std::string* cursor, std::set<std::string>* keys);
// An MGET of `count` keys: appends to `out` the values that decode and whose kernel id starts
// with `kernel_prefix` (others, and keys deleted meanwhile, are left out). Internal when the
// reply is not an array of `count` elements.
absl::Status DecodeRedisMget(const redisReply& reply, std::string_view location, size_t count,
                             std::string_view kernel_prefix, std::vector<StoredConfig>* out);

// One Redis connection, opened lazily and reopened after errors (see reconnect_backoff). Values
// are StoredConfig JSON strings; List walks the keys with SCAN (never KEYS). Leases are plain
// keys set with SET NX PX and removed by a script that checks the owner.
//
// Thread safety: thread-safe; calls are serialised on the one connection.
class RedisStore : public PersistentStore {
 public:
  // Validates `options` (InvalidArgument on a bad port, db, timeout or empty prefix). Does not
  // connect: a store whose Redis is down at start is still returned, and its calls answer
  // Unavailable until Redis is reachable.
  static absl::StatusOr<std::unique_ptr<RedisStore>> Connect(RedisStoreOptions options);
  ~RedisStore() override;

  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  std::string_view name() const override { return "redis"; }
  ConfigSource source() const override { return ConfigSource::kRedis; }
  // "redis://host:port/db" (no password).
  std::string location() const override;

  absl::StatusOr<StoredConfig> Get(const std::string& fingerprint_hash,
                                   const std::string& cache_key) override;
  absl::Status Put(const StoredConfig& value) override;
  absl::Status Delete(const std::string& fingerprint_hash, const std::string& cache_key) override;
  absl::StatusOr<std::vector<StoredConfig>> List(std::string_view kernel_prefix) override;

  // SET <lease key> <owner id> NX PX <ttl>. REQUIRES: ttl >= 1 ms.
  absl::StatusOr<bool> TryAcquireLease(const std::string& fingerprint_hash,
                                       const std::string& cache_key, absl::Duration ttl) override;
  // Deletes the lease only while it still holds this store's owner id; OK also when the lease
  // had expired or belongs to someone else (then it is left alone).
  absl::Status ReleaseLease(const std::string& fingerprint_hash,
                            const std::string& cache_key) override;

  // Round trip to the server: OK when it answers, Unavailable otherwise.
  absl::Status Ping();

  const RedisStoreOptions& options() const { return options_; }
  // The key a config is stored under.
  std::string ConfigKey(const std::string& fingerprint_hash, const std::string& cache_key) const;

 private:
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  explicit RedisStore(RedisStoreOptions options);

  // Runs one command. Unavailable when not connected or on an I/O error (the connection is
  // then dropped); an error reply from the server becomes Internal (Unavailable for LOADING,
  // BUSY and similar transient states).
  absl::StatusOr<Reply> Command(const std::vector<std::string>& args) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Reply> CommandLocked(const std::vector<std::string>& args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Connects (and sends AUTH / SELECT) unless connected or inside the backoff.
  absl::Status EnsureConnectedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the connection and starts the reconnect backoff.
  void DropConnectionLocked(std::string error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MGETs `keys` and appends to `out` the values that decode and whose kernel id starts with
  // `kernel_prefix`.
  absl::Status FetchMatching(const std::vector<std::string>& keys, std::string_view kernel_prefix,
                             std::vector<StoredConfig>* out);

  const RedisStoreOptions options_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // owned; null when disconnected
  absl::Time next_connect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_REDIS_STORE_H_
