// Who calls: the caller of an RPC as the server knows it (an identity with a role, and what the
// kernel says of the process on the other end of the connection), and the interface that finds
// the latter from a call's peer string.
#ifndef KERNELSERVE_SERVER_IDENTITY_H_
#define KERNELSERVE_SERVER_IDENTITY_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace kernelserve::server {

// What an identity may do. Callers run kernels (and Autotune, whose results go into the shared
// cache under the tuning lease) and manage their own shared memory; admins also write and
// delete configs in the shared cache and see and remove every identity's regions.
enum class Role { kCaller, kAdmin };

// "caller" or "admin".
std::string_view RoleName(Role role);

// The process on the other end of a call's connection, as the kernel reports it: SO_PEERCRED
// on a Unix socket; the owner of the client's socket for a TCP connection over loopback. Each
// field is nullopt when not known (a remote TCP peer, a lookup that found nothing). A value type.
struct PeerCredentials {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;  // Unix sockets only
  std::optional<pid_t> pid;  // Unix sockets only

  // "uid 1000 gid 1000 pid 4242", "uid 1000", or "unknown".
  std::string DebugString() const;
};

// The caller of one RPC. A value type.
struct Caller {
  // "anonymous" (a server without authentication), the identity a token names, "cert:<subject>"
  // (an mTLS client certificate) or "uid:<n>" (the peer's uid on a Unix socket). Printable
  // ASCII, at most kMaxIdentityBytes.
  std::string identity = "anonymous";
  Role role = Role::kAdmin;
  PeerCredentials peer;

  bool admin() const { return role == Role::kAdmin; }
};

// The longest identity name the server makes or accepts.
inline constexpr size_t kMaxIdentityBytes = 128;

// Finds the PeerCredentials of a call from its peer string (grpc::ServerContextBase::peer():
// "ipv4:127.0.0.1:40000", "ipv6:%5B::1%5D:40000" (gRPC percent-encodes the brackets), "fd:12"
// for a Unix socket connection the server accepted itself). Thread safety: implementations are
// thread-safe.
class PeerLookup {
 public:
  virtual ~PeerLookup() = default;
  // The credentials, each field nullopt where unknown; never fails.
  virtual PeerCredentials Find(std::string_view peer) const = 0;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_IDENTITY_H_
