#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/utils/string_view.h"

namespace kernelserve::server {
namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

constexpr size_t kMaxTokenIdentityBytes = 64;
constexpr std::string_view kSha256Prefix = "sha256:";

Digest Sha256(std::string_view text) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// True for a token identity: [A-Za-z0-9._@-], 1 to 64 characters.
bool IsTokenIdentity(std::string_view name) {
  if (name.empty() || name.size() > kMaxTokenIdentityBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '@' ||
           c == '-';
  });
}

// The digest a "sha256:<hex>" field names; InvalidArgument otherwise.
absl::StatusOr<Digest> DigestOfHex(std::string_view hex, const std::string& where) {
  if (hex.size() != 2 * SHA256_DIGEST_LENGTH) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": sha256: expected 64 hex digits, got ", hex.size(), " characters"));
  }
  Digest digest;
  for (size_t i = 0; i < digest.size(); ++i) {
    int value = 0;
    for (char c : hex.substr(2 * i, 2)) {
      const int v = absl::ascii_isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (c >= 'a' && c <= 'f')                           ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                           ? c - 'A' + 10
                                                                       : -1;
      if (v < 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": sha256: not a hex digit"));
      }
      value = value * 16 + v;
    }
    digest[i] = static_cast<unsigned char>(value);
  }
  return digest;
}

// `text` made into an identity suffix: printable ASCII kept, anything else (or a text too long
// for kMaxIdentityBytes with `prefix`) replaced by a cut and the first 16 hex digits of its
// SHA-256, so that distinct texts stay distinct.
std::string IdentityOf(std::string_view prefix, std::string_view text) {
  const bool printable = std::all_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (printable && prefix.size() + text.size() <= kMaxIdentityBytes) {
    return absl::StrCat(Sv(prefix), Sv(text));
  }
  std::string kept;
  for (char c : text.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    kept += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  const Digest digest = Sha256(text);
  return absl::StrCat(Sv(prefix), kept, "~", Hex(digest.data(), 8));
}

std::string_view ToView(grpc::string_ref ref) { return std::string_view(ref.data(), ref.size()); }

// The token of an "authorization" value "Bearer <token>" (the scheme in any case); nullopt
// for another scheme.
std::optional<std::string_view> BearerToken(std::string_view value) {
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) {
      return std::nullopt;
    }
  }
  return value.substr(kScheme.size());
}

}  // namespace

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(std::string_view text,
                                                       std::string_view path) {
  std::vector<TokenEntry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(Sv(text), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = absl::StrCat("--auth-token-file=", Sv(path), " line ", line_number);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    TokenEntry entry;
    entry.line = line_number;
    absl::string_view secret;
    if (fields.size() == 1) {
      entry.identity = "default";
      entry.role = Role::kAdmin;
      secret = fields[0];
    } else if (fields.size() == 3) {
      if (!IsTokenIdentity(StdSv(fields[0]))) {
        return absl::InvalidArgumentError(absl::StrCat(
            where,
            ": identity: expected 1 to 64 of A-Z a-z 0-9 . _ @ -, as in 'alice admin TOKEN'"));
      }
      entry.identity = std::string(fields[0]);
      if (fields[1] == "admin") {
        entry.role = Role::kAdmin;
      } else if (fields[1] == "caller") {
        entry.role = Role::kCaller;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(where, ": role: expected caller or admin"));
      }
      secret = fields[2];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected IDENTITY ROLE TOKEN (or one TOKEN alone), got ",
                       fields.size(), " fields"));
    }
    if (absl::StartsWith(secret, Sv(kSha256Prefix))) {
      absl::StatusOr<Digest> digest =
          DigestOfHex(StdSv(secret.substr(kSha256Prefix.size())), where);
      if (!digest.ok()) return digest.status();
      entry.digest = *digest;
    } else {
      entry.digest = Sha256(StdSv(secret));
    }
    for (const TokenEntry& other : entries) {
      if (other.digest == entry.digest) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the same token as line ", other.line));
      }
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-token-file=", Sv(path), ": the file holds no token"));
  }
  return entries;
}

Authenticator::Authenticator(AuthOptions options, const PeerLookup* peers)
    : options_(std::move(options)), peers_(peers) {}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(AuthOptions options,
                                                                     const PeerLookup* peers) {
  for (const std::string& name : options.admin_identities) {
    const bool valid =
        IsTokenIdentity(name) ||
        (absl::StartsWith(name, "uid:") && name.size() > 4 &&
         std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) ||
        (absl::StartsWith(name, "cert:") && name.size() > 5 && name.size() <= kMaxIdentityBytes);
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--admin-identities: '", name.substr(0, 64),
          "' is not an identity: expected a token identity, uid:<n> or cert:<subject>"));
    }
  }
  return std::unique_ptr<Authenticator>(new Authenticator(std::move(options), peers));
}

Role Authenticator::RoleOf(const std::string& identity) const {
  const auto& admins = options_.admin_identities;
  return std::find(admins.begin(), admins.end(), identity) != admins.end() ? Role::kAdmin
                                                                           : Role::kCaller;
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, const std::string& peer,
    const grpc::AuthContext* auth) const {
  Caller caller;
  // A Unix socket's peer (recorded at accept, a map lookup) names callers; a TCP peer's owner is
  // looked up only where it is needed (CallerWithPeer), not on every call.
  if (peers_ != nullptr && absl::StartsWith(peer, "fd:")) caller.peer = peers_->Find(peer);
  if (!options_.tokens.empty()) {
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
    }
    std::optional<std::string_view> token = BearerToken(ToView(it->second));
    if (!token.has_value()) {
      return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
    }
    // Every entry is compared, each in the same time wherever the digests differ.
    const Digest got = Sha256(*token);
    const TokenEntry* found = nullptr;
    for (const TokenEntry& entry : options_.tokens) {
      if (CRYPTO_memcmp(got.data(), entry.digest.data(), got.size()) == 0) found = &entry;
    }
    if (found == nullptr) return absl::UnauthenticatedError("the bearer token does not match");
    caller.identity = found->identity;
    caller.role = found->role == Role::kAdmin ? Role::kAdmin : RoleOf(found->identity);
    return caller;
  }
  if (options_.client_certificates && auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<grpc::string_ref> subject = auth->FindPropertyValues("x509_subject");
    if (subject.empty()) subject = auth->FindPropertyValues("x509_common_name");
    if (!subject.empty()) {
      caller.identity = IdentityOf("cert:", ToView(subject.front()));
      caller.role = RoleOf(caller.identity);
      return caller;
    }
  }
  // A Unix socket peer (the kernel gave its pid): named by its uid.
  if (caller.peer.uid.has_value() && caller.peer.pid.has_value()) {
    caller.identity = absl::StrCat("uid:", *caller.peer.uid);
    const bool own = *caller.peer.uid == 0 || *caller.peer.uid == geteuid();
    caller.role = own ? Role::kAdmin : RoleOf(caller.identity);
    return caller;
  }
  caller.identity = "anonymous";
  caller.role = options_.anonymous_role;
  return caller;
}

absl::StatusOr<Caller> Authenticator::Authenticate(const grpc::ServerContextBase& context) const {
  // The auth context is built on request (a shared_ptr and a lookup): only certificates need it.
  std::shared_ptr<const grpc::AuthContext> auth;
  if (options_.client_certificates) auth = context.auth_context();
  return Authenticate(context.client_metadata(), context.peer(), auth.get());
}

std::vector<std::string> Authenticator::TokenIdentities() const {
  std::set<std::string> names;
  for (const TokenEntry& entry : options_.tokens) names.insert(entry.identity);
  return std::vector<std::string>(names.begin(), names.end());
}

std::string Authenticator::Describe() const {
  if (!options_.tokens.empty()) {
    const size_t identities = TokenIdentities().size();
    return absl::StrCat("bearer tokens (", identities,
                        identities == 1 ? " identity" : " identities", ")");
  }
  if (options_.client_certificates) return "client certificates";
  return absl::StrCat("none: callers are anonymous (", Sv(RoleName(options_.anonymous_role)),
                      ") or, on a Unix socket, uid:<n>");
}

namespace {

class ReflectionInterceptor final : public grpc::experimental::Interceptor {
 public:
  ReflectionInterceptor(const Authenticator* auth, grpc::experimental::ServerRpcInfo* info)
      : auth_(auth), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_INITIAL_METADATA)) {
      grpc::ServerContextBase* context = info_->server_context();
      const auto* metadata = methods->GetRecvInitialMetadata();
      const std::string peer = context->peer();
      if (metadata == nullptr ||
          !auth_->Authenticate(*metadata, peer, context->auth_context().get()).ok()) {
        context->TryCancel();
      }
    }
    methods->Proceed();
  }

 private:
  const Authenticator* const auth_;
  grpc::experimental::ServerRpcInfo* const info_;
};

class ReflectionGuardFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReflectionGuardFactory(const Authenticator* auth) : auth_(auth) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (!absl::StartsWith(info->method(), "/grpc.reflection.")) return nullptr;
    return new ReflectionInterceptor(auth_, info);
  }

 private:
  const Authenticator* const auth_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ReflectionGuard(
    const Authenticator* auth) {
  return std::make_unique<ReflectionGuardFactory>(auth);
}

}  // namespace kernelserve::server
