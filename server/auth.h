// Authenticator: who makes a call. From a bearer token (--auth-token-file names each token's
// identity and role), the subject of an mTLS client certificate, the peer's uid on a Unix
// socket, or, on a server without any of these, the one anonymous identity.
#ifndef KERNELSERVE_SERVER_AUTH_H_
#define KERNELSERVE_SERVER_AUTH_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/identity.h"

namespace kernelserve::server {

// One line of a token file. A value type.
struct TokenEntry {
  std::array<unsigned char, 32> digest{};  // SHA-256 of the token; the token itself is not kept
  std::string identity;                    // printable, at most kMaxIdentityBytes
  Role role = Role::kCaller;
  int line = 0;  // in the file, for messages
};

// Parses the text of a token file. Each line that is not empty or a comment (#) is either
//   IDENTITY ROLE TOKEN   a token of identity IDENTITY ([A-Za-z0-9._@-], at most 64 characters)
//                         with ROLE "caller" or "admin"; TOKEN is the token itself or
//                         "sha256:" and the 64 hex digits of its SHA-256, so that the file
//                         need not hold it;
//   TOKEN                 (the single-token file of earlier versions): identity "default",
//                         role admin.
// InvalidArgument naming `path` and the line for anything else, for a token given twice and for
// a file without tokens.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(std::string_view text,
                                                       std::string_view path);

// Options of an Authenticator. Every field has a default.
struct AuthOptions {
  std::vector<TokenEntry> tokens;  // empty = no bearer tokens
  // Identities given the admin role besides the token file's ("cert:CN=ops", "uid:1000").
  std::vector<std::string> admin_identities;
  // The role of the anonymous identity (a server without tokens, certificates or a Unix socket
  // peer): admin keeps a single-user server as it always was.
  Role anonymous_role = Role::kAdmin;
  // Client certificates are required (mTLS): callers without a token are named by theirs.
  bool client_certificates = false;
};

// Thread safety: thread-safe (immutable after Create).
class Authenticator {
 public:
  // `peers` (not owned, may be null, must outlive the authenticator) tells who is on the other
  // end of a connection. InvalidArgument for an admin identity that is not a valid name.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(AuthOptions options,
                                                               const PeerLookup* peers);

  // The caller of a call with `metadata` from `peer` (its context's peer()) whose auth context is
  // `auth` (may be null). With tokens: the token's identity and role, Unauthenticated when the
  // call carries no "authorization: Bearer <token>" or an unknown token (every token is
  // compared, each in the same time wherever it differs). Without tokens: "cert:<subject>" of
  // the client certificate under mTLS, "uid:<n>" for a Unix socket peer, else "anonymous".
  // Caller::peer is filled for a Unix socket peer only (see CallerWithPeer).
  absl::StatusOr<Caller> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, const std::string& peer,
      const grpc::AuthContext* auth) const;
  // The same for a server call's context.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context) const;

  // The identities the token file names (for metrics labels known at startup).
  std::vector<std::string> TokenIdentities() const;
  // For the startup line: "bearer tokens (3 identities)", "client certificates",
  // "anonymous (admin)" ...
  std::string Describe() const;

 private:
  Authenticator(AuthOptions options, const PeerLookup* peers);
  Role RoleOf(const std::string& identity) const;

  const AuthOptions options_;
  const PeerLookup* const peers_;
};

// Makes gRPC server reflection follow the token rule: a reflection call that `auth` does not
// authenticate is cancelled before it is answered (the client sees CANCELLED). Every other
// method is left to its handler, which authenticates itself. `auth` must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ReflectionGuard(
    const Authenticator* auth);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_AUTH_H_
