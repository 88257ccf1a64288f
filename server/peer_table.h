// What the server knows of the process on the other end of each connection it accepted: the
// credentials of Unix socket peers (SO_PEERCRED, read at accept), and the owner of a loopback
// TCP client's socket, found in the kernel's socket tables (/proc/net/tcp, /proc/net/tcp6).
#ifndef KERNELSERVE_SERVER_PEER_TABLE_H_
#define KERNELSERVE_SERVER_PEER_TABLE_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/identity.h"

namespace kernelserve::server {

// A TCP endpoint: an address in IPv6 form (an IPv4 address as ::ffff:a.b.c.d, so that it
// equals the same address mapped into IPv6) and a port. A value type.
struct TcpEndpoint {
  std::array<uint8_t, 16> address = {};
  uint16_t port = 0;

  // 127.0.0.0/8 (plain or mapped) or ::1.
  bool loopback() const;

  friend bool operator==(const TcpEndpoint&, const TcpEndpoint&) = default;
  template <typename H>
  friend H AbslHashValue(H hash, const TcpEndpoint& endpoint) {
    return H::combine(std::move(hash), endpoint.address, endpoint.port);
  }
};

// The endpoint of an AF_INET or AF_INET6 socket address of `length` bytes; nullopt for other
// families.
std::optional<TcpEndpoint> EndpointOf(const sockaddr* address, socklen_t length);

// The endpoint a gRPC peer string names: "ipv4:127.0.0.1:40000", "ipv6:[::1]:40000" (gRPC
// writes the brackets percent-encoded: "ipv6:%5B::1%5D:40000"). nullopt for anything else
// ("fd:12", "unix:", a malformed string).
std::optional<TcpEndpoint> ParsePeerEndpoint(std::string_view peer);

// The uid owning the socket listed in `table` (the text of /proc/net/tcp, /proc/net/tcp6, or
// both one after the other) whose local endpoint is `local` and whose remote port is
// `remote_port`: the client's end of a connection from `local` to a server on that port.
// Listening and TIME_WAIT entries do not count (the kernel lists the latter with uid 0). The
// addresses are read in this host's byte order, as the kernel writes them. nullopt when no
// entry matches, or when the entries that match disagree.
std::optional<uid_t> FindSocketOwner(std::string_view table, const TcpEndpoint& local,
                                     uint16_t remote_port);

// The peers of the connections a listener on `server_port` accepted (0 for a Unix socket).
// Thread safety: thread-safe.
class PeerTable final : public PeerLookup {
 public:
  explicit PeerTable(uint16_t server_port) : server_port_(server_port) {}
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // A Unix socket connection accepted as descriptor `fd`, whose peer is `credentials`. gRPC
  // names its calls' peer "fd:<fd>"; this replaces what a closed connection on the same
  // descriptor number left.
  void RecordUnix(int fd, const PeerCredentials& credentials);
  // A TCP connection accepted from `peer`: forgets the owner found for an earlier connection
  // from the same endpoint.
  void ForgetTcp(const TcpEndpoint& peer);

  // "fd:N": the credentials recorded for N. "ipv4:..." or "ipv6:..." with a loopback address:
  // the uid owning the client's socket (read from /proc/net/tcp{,6} once per connection).
  // Anything else: unknown. Valid while the call is in progress: gRPC keeps a connection's
  // descriptor open until its last call is done, so neither N nor the client's endpoint can
  // belong to another connection before then.
  PeerCredentials Find(std::string_view peer) const override;

 private:
  // The owner of `peer`'s socket from the kernel's tables; nullopt when not found.
  std::optional<uid_t> ReadOwner(const TcpEndpoint& peer) const;

  const uint16_t server_port_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerCredentials> unix_peers_ ABSL_GUARDED_BY(mu_);
  // Owners found by Find, until a new connection from the same endpoint.
  mutable absl::flat_hash_map<TcpEndpoint, uid_t> tcp_owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_PEER_TABLE_H_
