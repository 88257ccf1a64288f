#include "server/listener.h"

#include <fcntl.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_posix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "core/utils/log.h"

namespace kernelserve::server {
namespace {

// Descriptors kept for the server's own files (at most an eighth of the limit).
constexpr uint64_t kReserveFds = 64;
// Connections accepted from one socket before the others get a turn.
constexpr int kAcceptBatch = 64;
// After running out of descriptors or memory, how long before accepting again.
constexpr absl::Duration kPause = absl::Milliseconds(100);
// Trouble less than this apart is one run, logged once.
constexpr absl::Duration kQuiet = absl::Seconds(10);
// Tries at a free port that every address of a host has free.
constexpr int kPortAttempts = 10;
constexpr char kExpectedAddress[] =
    "expected host:port, [IPv6]:port, unix:PATH or unix-abstract:NAME";
// What the listener does while out of descriptors, for the log.
constexpr char kShedding[] = "; closing new connections until descriptors free up";

// A socket address of AF_INET or AF_INET6.
struct SocketAddress {
  sockaddr_storage storage = {};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  friend bool operator==(const SocketAddress& a, const SocketAddress& b) {
    return a.length == b.length && std::memcmp(&a.storage, &b.storage, a.length) == 0;
  }
};

SocketAddress Wildcard(int family) {
  SocketAddress address;
  address.storage.ss_family = static_cast<sa_family_t>(family);
  address.length = family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  return address;  // in6addr_any and INADDR_ANY are all zeros
}

bool IsWildcard(const SocketAddress& address) {
  if (address.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr.s_addr == INADDR_ANY;
  }
  const in6_addr& ipv6 = reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_addr;
  return std::memcmp(&ipv6, &in6addr_any, sizeof(ipv6)) == 0;
}

void SetPort(SocketAddress* address, int port) {
  const uint16_t network = htons(static_cast<uint16_t>(port));
  if (address->family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&address->storage)->sin_port = network;
  } else {
    reinterpret_cast<sockaddr_in6*>(&address->storage)->sin6_port = network;
  }
}

// The port a bound socket has; 0 when unknown.
int LocalPort(int fd) {
  sockaddr_storage local = {};
  socklen_t length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return 0;
  if (local.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
}

// The IPv4 and IPv6 addresses `host` resolves to, each once.
absl::StatusOr<std::vector<SocketAddress>> Resolve(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(error)));
  }
  std::vector<SocketAddress> addresses;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    if ((entry->ai_family != AF_INET && entry->ai_family != AF_INET6) ||
        entry->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    SocketAddress address;
    std::memcpy(&address.storage, entry->ai_addr, entry->ai_addrlen);
    address.length = entry->ai_addrlen;
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
      addresses.push_back(address);
    }
  }
  freeaddrinfo(found);
  if (addresses.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": no IP address"));
  }
  return addresses;
}

// Unavailable saying why a bind or listen failed with `error`.
absl::Status BindError(int error) {
  std::string why;
  switch (error) {
    case EADDRINUSE:
      why = "it is in use (a server already running?)";
      break;
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      why = "not an address of this host";
      break;
    default:
      why = std::strerror(error);
  }
  return absl::UnavailableError(absl::StrCat("cannot listen on this address: ", why));
}

// True for the errors of an address this host does not have (or an IPv6 address on a host
// without IPv6).
bool NotOfThisHost(int error) { return error == EADDRNOTAVAIL || error == EAFNOSUPPORT; }

// A listening TCP socket on `address`; -errno when it cannot be made.
int ListenTcp(const SocketAddress& address) {
  const int fd = socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1;
  const int zero = 0;
  // A restarted server binds its port again while the old connections linger in TIME_WAIT. (On
  // Linux this does not let two listeners share a port: a port in use still fails.)
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // [::] takes IPv4 connections too.
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  if (bind(fd, address.get(), address.length) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// Sockets bound on one port, or the errno that stopped the binding (then none are open).
struct BoundPort {
  std::vector<int> fds;
  int port = 0;
  int error = 0;
};

// Binds every address of `addresses` on `port` (0: the first address picks a free one, the
// others take the same). Addresses this host does not have are skipped while another binds.
BoundPort BindOnOnePort(std::vector<SocketAddress> addresses, int port) {
  BoundPort bound;
  bound.port = port;
  int skipped = 0;
  for (SocketAddress& address : addresses) {
    SetPort(&address, bound.port);
    const int fd = ListenTcp(address);
    if (fd < 0 && NotOfThisHost(-fd)) {
      skipped = -fd;
      continue;
    }
    if (fd < 0) {
      CloseAll(bound.fds);
      bound.fds.clear();
      bound.error = -fd;
      return bound;
    }
    bound.fds.push_back(fd);
    if (bound.port == 0) bound.port = LocalPort(fd);
  }
  if (bound.fds.empty()) bound.error = skipped != 0 ? skipped : EADDRNOTAVAIL;
  return bound;
}

// Removes a socket file left at `path` by a server that is gone.
void RemoveStaleSocket(const std::string& path) {
  struct stat file = {};
  if (lstat(path.c_str(), &file) == 0 && S_ISSOCK(file.st_mode)) unlink(path.c_str());
}

PeerCredentials UnixPeerCredentials(int fd) {
  PeerCredentials credentials;
  ucred peer = {};
  socklen_t length = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && length == sizeof(peer)) {
    credentials.uid = peer.uid;
    credentials.gid = peer.gid;
    credentials.pid = peer.pid;
  }
  return credentials;
}

// The most open files the kernel allows a process (fs.nr_open).
uint64_t KernelFileCeiling() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t ceiling = 0;
  return in >> ceiling && ceiling > 0 ? ceiling : uint64_t{1} << 20;
}

bool OutOfDescriptors(int error) { return error == EMFILE || error == ENFILE; }
// Errors of one connection (aborted before it was accepted, or a network error the kernel
// passes on through accept): the next may be fine.
bool ConnectionError(int error) {
  switch (error) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EPERM:  // a firewall rule
      return true;
    default:
      return false;
  }
}

// "host:port" or "[v6]:port" into address->host and address->port.
absl::Status ParseHostPort(absl::string_view text, ListenAddress* address) {
  absl::string_view port;
  if (absl::ConsumePrefix(&text, "[")) {
    const size_t close = text.find("]:");
    if (close == absl::string_view::npos) return absl::InvalidArgumentError(kExpectedAddress);
    address->host = std::string(text.substr(0, close));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return absl::InvalidArgumentError(kExpectedAddress);
    address->host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (absl::StrContains(address->host, ':')) {
      return absl::InvalidArgumentError("an IPv6 address goes in brackets: [::1]:port");
    }
  }
  if (address->host.empty()) {
    return absl::InvalidArgumentError("expected a host before the port (0.0.0.0 for every one)");
  }
  if (!absl::SimpleAtoi(port, &address->port) || address->port < 0 || address->port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("expected a port 0..65535, got '", port, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view listen) {
  absl::string_view rest(listen.data(), listen.size());
  ListenAddress address;
  if (absl::ConsumePrefix(&rest, "unix-abstract:")) {
    address.kind = ListenAddress::Kind::kUnixAbstract;
    address.path = std::string(rest);
    if (rest.empty()) return absl::InvalidArgumentError("unix-abstract: expected a name");
    return address;
  }
  if (absl::ConsumePrefix(&rest, "unix:")) {
    absl::ConsumePrefix(&rest, "//");  // unix:///abs/path
    address.kind = ListenAddress::Kind::kUnix;
    address.path = std::string(rest);
    if (rest.empty()) return absl::InvalidArgumentError("unix: expected a path");
    return address;
  }
  KS_RETURN_IF_ERROR(ParseHostPort(rest, &address));
  return address;
}

uint64_t RaiseFileLimit() {
  rlimit limit = {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur != limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? KernelFileCeiling() : limit.rlim_max;
    if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Bind(std::string_view listen,
                                                         ListenerOptions options) {
  KS_ASSIGN_OR_RETURN(ListenAddress address, ParseListenAddress(listen));
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  absl::StatusOr<Sockets> sockets =
      address.kind == ListenAddress::Kind::kTcp ? BindTcp(address) : BindUnix(address);
  if (!sockets.ok()) {
    close(wake_fd);
    return sockets.status();
  }
  std::string label(listen);  // with the port chosen for port 0
  if (address.kind == ListenAddress::Kind::kTcp) {
    label =
        absl::StrCat(absl::StrContains(address.host, ':') ? "[" + address.host + "]" : address.host,
                     ":", sockets->port);
  }
  return std::unique_ptr<Listener>(
      new Listener(std::move(label), std::move(options), *std::move(sockets), wake_fd));
}

absl::StatusOr<Listener::Sockets> Listener::BindTcp(const ListenAddress& address) {
  KS_ASSIGN_OR_RETURN(std::vector<SocketAddress> resolved, Resolve(address.host));
  // A wildcard address is one socket for IPv6 and IPv4 both ([::]), or IPv4 alone on a host
  // without IPv6.
  std::vector<std::vector<SocketAddress>> choices = {resolved};
  if (std::any_of(resolved.begin(), resolved.end(), IsWildcard)) {
    choices = {{Wildcard(AF_INET6)}, {Wildcard(AF_INET)}};
  }
  BoundPort bound;
  for (const std::vector<SocketAddress>& choice : choices) {
    for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
      bound = BindOnOnePort(choice, address.port);
      // The free port the first address got may be taken on another: try another.
      if (bound.error != EADDRINUSE || address.port != 0 || choice.size() == 1) break;
    }
    if (!NotOfThisHost(bound.error)) break;
  }
  if (bound.error != 0) return BindError(bound.error);
  Sockets sockets;
  sockets.fds = std::move(bound.fds);
  sockets.port = bound.port;
  return sockets;
}

absl::StatusOr<Listener::Sockets> Listener::BindUnix(const ListenAddress& address) {
  const bool abstract = address.kind == ListenAddress::Kind::kUnixAbstract;
  sockaddr_un local = {};
  local.sun_family = AF_UNIX;
  const size_t offset = abstract ? 1 : 0;  // an abstract name follows a NUL byte
  if (address.path.size() + offset >= sizeof(local.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(abstract ? "the name" : "the path",
                                                   " is longer than ",
                                                   sizeof(local.sun_path) - 1 - offset, " bytes"));
  }
  std::memcpy(local.sun_path + offset, address.path.data(), address.path.size());
  const socklen_t length =
      abstract
          ? static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + address.path.size())
          : static_cast<socklen_t>(sizeof(local));
  if (!abstract) RemoveStaleSocket(address.path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return BindError(errno);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), length) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    return BindError(error);
  }
  Sockets sockets;
  sockets.fds = {fd};
  sockets.unix_socket = true;
  struct stat file = {};
  if (!abstract && stat(address.path.c_str(), &file) == 0) {
    sockets.unix_path = address.path;
    sockets.unix_device = file.st_dev;
    sockets.unix_inode = file.st_ino;
  }
  return sockets;
}

Listener::Listener(std::string label, ListenerOptions options, Sockets sockets, int wake_fd)
    : label_(std::move(label)),
      options_(std::move(options)),
      sockets_(std::move(sockets)),
      port_(sockets_.port),
      peers_(static_cast<uint16_t>(sockets_.port)),
      wake_fd_(wake_fd) {}

Listener::~Listener() {
  Stop();
  close(wake_fd_);
}

void Listener::AddTo(grpc::ServerBuilder* builder) {
  // Plaintext Unix connections become channels of their own descriptor (see HandOver).
  if (sockets_.unix_socket && options_.tls == nullptr) return;
  acceptor_ = builder->experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      options_.tls != nullptr ? options_.tls : grpc::InsecureServerCredentials());
}

void Listener::Start(grpc::Server* server) {
  server_ = server;
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  thread_ = std::thread([this] { AcceptLoop(); });
  pthread_setname_np(thread_.native_handle(), "ks-accept");
}

void Listener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const uint64_t wake = 1;
    (void)!write(wake_fd_, &wake, sizeof(wake));
    thread_.join();
  }
  CloseSockets();
  if (spare_fd_ >= 0) close(spare_fd_);
  spare_fd_ = -1;
}

void Listener::CloseSockets() {
  CloseAll(sockets_.fds);
  sockets_.fds.clear();
  if (sockets_.unix_path.empty()) return;
  // Removed only while it is still this listener's socket file.
  struct stat file = {};
  if (stat(sockets_.unix_path.c_str(), &file) == 0 && file.st_dev == sockets_.unix_device &&
      file.st_ino == sockets_.unix_inode) {
    unlink(sockets_.unix_path.c_str());
  }
  sockets_.unix_path.clear();
}

ListenerStats Listener::stats() const {
  ListenerStats stats;
  stats.accepted = accepted_.load();
  stats.shed = shed_.load();
  stats.bursts = bursts_.load();
  return stats;
}

PeerCredentials Listener::Find(std::string_view peer) const { return peers_.Find(peer); }

void Listener::AcceptLoop() {
  std::vector<pollfd> polled = {{wake_fd_, POLLIN, 0}};
  for (int fd : sockets_.fds) polled.push_back({fd, POLLIN, 0});
  bool pausing = false;
  while (true) {
    for (pollfd& entry : polled) entry.revents = 0;
    // While pausing, only the wake descriptor for kPause; then every socket is tried again.
    const int ready = poll(polled.data(), pausing ? 1 : polled.size(),
                           pausing ? static_cast<int>(absl::ToInt64Milliseconds(kPause)) : -1);
    if (ready < 0 && errno != EINTR) {
      NoteTrouble(absl::StrCat("poll: ", std::strerror(errno), "; trying again every ",
                               absl::FormatDuration(kPause)));
      pausing = true;
      continue;
    }
    if (polled[0].revents != 0) return;
    const bool try_all = pausing;
    pausing = false;
    for (size_t i = 1; i < polled.size(); ++i) {
      if ((try_all || polled[i].revents != 0) &&
          AcceptPending(polled[i].fd) == Outcome::kExhausted) {
        pausing = true;
      }
    }
  }
}

Listener::Outcome Listener::AcceptPending(int listen_fd) {
  ReadFileLimit();  // an operator may change it while the server runs (prlimit)
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage peer = {};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (static_cast<uint64_t>(fd) + reserve_ >= fd_limit_) {
        Shed(fd, absl::StrCat("connection on descriptor ", fd, " of ", fd_limit_, " (the last ",
                              reserve_, " are kept for the server's own files)", kShedding));
      } else {
        HandOver(listen_fd, fd, reinterpret_cast<const sockaddr*>(&peer), length);
      }
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return Outcome::kDrained;
    if (ConnectionError(error)) continue;
    if (OutOfDescriptors(error) && ShedWithSpare(listen_fd, error)) continue;
    // Out of descriptors with no spare, out of kernel memory (ENOBUFS, ENOMEM), or unexpected:
    // the listener stays, and tries again after a pause.
    NoteTrouble(absl::StrCat("accept: ", std::strerror(error), "; trying again every ",
                             absl::FormatDuration(kPause)));
    return Outcome::kExhausted;
  }
  return Outcome::kDrained;  // poll tells of the rest
}

void Listener::ReadFileLimit() {
  rlimit limit = {};
  fd_limit_ = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : RLIM_INFINITY;
  reserve_ = std::min(kReserveFds, fd_limit_ / 8);
}

bool Listener::ShedWithSpare(int listen_fd, int error) {
  if (spare_fd_ < 0) spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_fd_ < 0) return false;
  close(spare_fd_);
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) Shed(fd, absl::StrCat("accept: ", std::strerror(error), kShedding));
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

void Listener::Shed(int fd, absl::string_view why) {
  NoteTrouble(why);  // counted before the client can tell
  ++shed_;
  close(fd);
}

void Listener::HandOver(int listen_fd, int fd, const sockaddr* peer, socklen_t peer_length) {
  ++accepted_;
  if (sockets_.unix_socket && options_.tls == nullptr) {
    // gRPC names the calls of this channel "fd:<fd>", which Find looks up.
    peers_.RecordUnix(fd, UnixPeerCredentials(fd));
    grpc::AddInsecureChannelFromFd(server_, fd);
    return;
  }
  if (!sockets_.unix_socket) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (std::optional<TcpEndpoint> endpoint = EndpointOf(peer, peer_length)) {
      peers_.ForgetTcp(*endpoint);
    }
  }
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
  connection.listener_fd = listen_fd;
  connection.fd = fd;
  acceptor_->HandleNewConnection(&connection);  // gRPC owns fd from here, and closes it
}

void Listener::NoteTrouble(absl::string_view what) {
  const absl::Time now = absl::Now();
  if (now - last_trouble_ > kQuiet) {
    ++bursts_;
    KS_LOG(WARNING) << "kernelserve-server: listening on " << label_ << ": " << what;
  }
  last_trouble_ = now;
}

}  // namespace kernelserve::server
