// Listener: the server's own accept loop. It binds the --listen address, accepts connections on
// a thread of its own and hands each to gRPC, so that the server keeps accepting after running
// out of file descriptors (gRPC's own listener stops for good at the first such error) and
// knows the process on the other end of a call (PeerLookup). Also: raising the process's limit
// on open files at startup.
#ifndef KERNELSERVE_SERVER_LISTENER_H_
#define KERNELSERVE_SERVER_LISTENER_H_

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/identity.h"
#include "server/peer_table.h"

namespace kernelserve::server {

// A parsed --listen address. A value type.
struct ListenAddress {
  enum class Kind { kTcp, kUnix, kUnixAbstract };
  Kind kind = Kind::kTcp;
  std::string host;  // kTcp: a name or a numeric address (IPv6 without its brackets)
  int port = 0;      // kTcp: 0 = a free port
  std::string path;  // kUnix: the socket file; kUnixAbstract: the name
};

// "host:port", "[v6]:port", "unix:PATH" (also "unix:///abs/path") or "unix-abstract:NAME".
// InvalidArgument saying what is wrong otherwise.
absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view listen);

// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit where the kernel
// allows it; returns the soft limit in force afterwards (RLIM_INFINITY when unlimited).
uint64_t RaiseFileLimit();

struct ListenerOptions {
  // The connections' TLS credentials; null = plaintext.
  std::shared_ptr<grpc::ServerCredentials> tls;
};

// Counts since Start. A value type.
struct ListenerStats {
  int64_t accepted = 0;  // connections handed to gRPC
  int64_t shed = 0;      // connections closed at once for want of descriptors
  int64_t bursts = 0;    // runs of running out of descriptors or memory, each logged once
};

// Accepts the connections of one --listen address (every address its host resolves to, on one
// port) and hands them to a grpc::Server: TCP connections, and Unix ones under TLS, through
// gRPC's external connection acceptor (gRPC names their peer "ipv4:ADDR:PORT" or
// "ipv6:[ADDR]:PORT"); plaintext Unix connections as channels from their descriptor (peer
// "fd:N"), their peer's SO_PEERCRED read first. Find answers for both.
//
// Out of descriptors: the listener keeps a reserve of descriptors for the server's own files
// (shared memory, the store, Redis) and closes at once a connection that would eat into it, so
// that the client gets an error instead of waiting in the accept queue; when accept itself
// fails for want of descriptors, it closes a spare one it holds to accept and close the next
// connection. When accept fails for want of kernel memory it retries after a short pause. Each
// run of these is logged once. The reserve is judged by the accepted descriptor's number (the
// kernel gives out the lowest free one); connections that close below it leave holes that new
// ones fill, so near the limit a connection may still take one of the last descriptors.
//
// Thread safety: Find and stats are thread-safe; AddTo, Start and Stop are called from one
// thread.
class Listener final : public PeerLookup {
 public:
  // Binds and listens on `listen` (see ParseListenAddress), accepting nothing yet. A Unix
  // socket file left at PATH is replaced (CheckUnixSocketFree tells whether a process still
  // serves on it). InvalidArgument for a malformed address; Unavailable when it cannot be
  // bound (the message says why: in use, not an address of this host, ...).
  static absl::StatusOr<std::unique_ptr<Listener>> Bind(std::string_view listen,
                                                        ListenerOptions options);
  // Stop().
  ~Listener() override;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Registers with `builder` the acceptor connections go through.
  // REQUIRES: called once, before builder->BuildAndStart().
  void AddTo(grpc::ServerBuilder* builder);
  // Starts the accept thread, which hands connections to `server` (borrowed).
  // REQUIRES: AddTo ran on the builder that built `server`; `server` is started and outlives
  // Stop(); called once.
  void Start(grpc::Server* server);
  // Stops accepting: the accept thread ends, the listening sockets close and a Unix socket file
  // is removed. Connections handed over stay with gRPC. Idempotent.
  void Stop();

  // The port listened on (the one chosen when --listen named port 0); 0 for a Unix socket.
  int port() const { return port_; }
  ListenerStats stats() const;

  PeerCredentials Find(std::string_view peer) const override;

 private:
  enum class Outcome { kDrained, kExhausted };

  // Listening sockets, bound.
  struct Sockets {
    std::vector<int> fds;
    int port = 0;
    bool unix_socket = false;
    std::string unix_path;  // a socket file to remove at Stop; "" = none
    dev_t unix_device = 0;  // the file's, to remove it only while it is still this one
    ino_t unix_inode = 0;
  };
  static absl::StatusOr<Sockets> BindTcp(const ListenAddress& address);
  static absl::StatusOr<Sockets> BindUnix(const ListenAddress& address);

  Listener(std::string label, ListenerOptions options, Sockets sockets, int wake_fd);
  // Closes the listening sockets and removes the Unix socket file.
  void CloseSockets();

  void AcceptLoop();
  // Accepts what is pending on `listen_fd` (a batch at most).
  Outcome AcceptPending(int listen_fd);
  // fd_limit_ and reserve_ from RLIMIT_NOFILE's soft limit.
  void ReadFileLimit();
  // Out of descriptors (accept failed with `error`): accepts one pending connection through the
  // spare descriptor and closes it. False when there is no spare or nothing was pending.
  bool ShedWithSpare(int listen_fd, int error);
  void Shed(int fd, absl::string_view why);
  void HandOver(int listen_fd, int fd, const sockaddr* peer, socklen_t peer_length);
  // Logs `what` when it starts a run of trouble (trouble less than 10 s apart is one run).
  void NoteTrouble(absl::string_view what);

  const std::string label_;  // the address for the log: "127.0.0.1:50051", "unix:PATH"
  const ListenerOptions options_;
  Sockets sockets_;  // closed by Stop
  const int port_;
  PeerTable peers_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  grpc::Server* server_ = nullptr;
  const int wake_fd_;  // an eventfd: Stop wakes the accept thread through it
  std::thread thread_;
  bool stopped_ = false;
  // The accept thread's (and Start's, Stop's when it is not running).
  uint64_t fd_limit_ = 0;  // RLIMIT_NOFILE's soft limit
  uint64_t reserve_ = 0;   // descriptors below fd_limit_ kept for the server's own files
  int spare_fd_ = -1;      // closed to accept and shed a connection when out of descriptors
  absl::Time last_trouble_ = absl::InfinitePast();
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> shed_{0};
  std::atomic<int64_t> bursts_{0};
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_LISTENER_H_
