// The server's listener (server/listener.h): parsing --listen addresses; and, in this process, a
// grpc::Server fed by a Listener answering who is on the other end of a call, refusing a port in
// use, accepting again after running out of descriptors, and leaving no descriptor behind.
#include "server/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/ks-", name, "-XXXXXX");
  const char* made = mkdtemp(pattern.data());
  return made != nullptr ? std::string(made) : std::string("/tmp");
}

// --- ParseListenAddress ---

TEST(ParseListenAddressTest, ReadsTcpAndUnixAddresses) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.1:50051");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, ListenAddress::Kind::kTcp);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 50051);

  a = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);

  a = ParseListenAddress("localhost:8080");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "localhost");

  for (const auto& [listen, path] :
       {std::pair{"unix:/run/ks.sock", "/run/ks.sock"},
        std::pair{"unix:///run/ks.sock", "/run/ks.sock"}, std::pair{"unix:ks.sock", "ks.sock"}}) {
    a = ParseListenAddress(listen);
    ASSERT_TRUE(a.ok()) << listen << ": " << a.status();
    EXPECT_EQ(a->kind, ListenAddress::Kind::kUnix) << listen;
    EXPECT_EQ(a->path, path) << listen;
  }
  a = ParseListenAddress("unix-abstract:kernelserve");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, ListenAddress::Kind::kUnixAbstract);
  EXPECT_EQ(a->path, "kernelserve");
}

TEST(ParseListenAddressTest, RefusesMalformedAddresses) {
  for (const char* listen :
       {"50051", "::1:50051", ":50051", "[::1]50051", "127.0.0.1:70000", "127.0.0.1:-1",
        "127.0.0.1:http", "127.0.0.1:", "unix:", "unix-abstract:", ""}) {
    EXPECT_EQ(ParseListenAddress(listen).status().code(), absl::StatusCode::kInvalidArgument)
        << listen;
  }
}

// --- a grpc::Server fed by a Listener, in this process ---

// Answers every call with "<peer>|<Find(peer).DebugString()>".
class PeerService final : public grpc::CallbackGenericService {
 public:
  explicit PeerService(const PeerLookup* peers) : peers_(peers) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(const std::string& answer) {
        grpc::Slice slice(answer);
        answer_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&answer_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer answer_;
    };
    const std::string peer = context->peer();
    return new Reactor(absl::StrCat(peer, "|", peers_->Find(peer).DebugString()));
  }

 private:
  const PeerLookup* peers_;
};

// A Listener on `listen` and the grpc::Server it feeds, serving PeerService.
class PeerServer {
 public:
  explicit PeerServer(const std::string& listen) : listen_(listen) {
    absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Bind(listen, {});
    status_ = listener.status();
    if (!listener.ok()) return;
    listener_ = *std::move(listener);
    service_ = std::make_unique<PeerService>(listener_.get());
    grpc::ServerBuilder builder;
    listener_->AddTo(&builder);
    builder.RegisterCallbackGenericService(service_.get());
    server_ = builder.BuildAndStart();
    listener_->Start(server_.get());
  }
  ~PeerServer() {
    if (listener_ != nullptr) listener_->Stop();
    if (server_ != nullptr) {
      server_->Shutdown();
      server_->Wait();
    }
  }

  const absl::Status& status() const { return status_; }
  Listener& listener() { return *listener_; }
  // The gRPC target clients of this host use.
  std::string target() const {
    if (absl::StartsWith(listen_, "unix")) return listen_;
    if (absl::StartsWith(listen_, "[::1]")) return absl::StrCat("[::1]:", listener_->port());
    return absl::StrCat("127.0.0.1:", listener_->port());
  }

 private:
  const std::string listen_;
  absl::Status status_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
};

// PeerService's answer to a call to `target`, split at '|': {peer, credentials}.
absl::StatusOr<std::vector<std::string>> AskPeer(const std::string& target) {
  grpc::GenericStub stub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice slice("?");
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/kernelserve.test.Peer/Who", grpc::StubOptions(), &request, &response,
                 [&done](const grpc::Status& status) { done.set_value(status); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string text;
  for (const grpc::Slice& s : slices)
    text.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return std::vector<std::string>(absl::StrSplit(text, '|'));
}

std::string Expected(std::optional<uid_t> uid, std::optional<gid_t> gid = std::nullopt,
                     std::optional<pid_t> pid = std::nullopt) {
  PeerCredentials credentials;
  credentials.uid = uid;
  credentials.gid = gid;
  credentials.pid = pid;
  return credentials.DebugString();
}

TEST(ListenerTest, UnixSocketPeerIsThisProcess) {
  for (const std::string& listen :
       {"unix:" + MakeTempDir("listener-peer") + "/ks.sock",
        absl::StrCat("unix-abstract:kernelserve-listener-test-", getpid())}) {
    PeerServer server(listen);
    ASSERT_TRUE(server.status().ok()) << server.status();
    absl::StatusOr<std::vector<std::string>> answer = AskPeer(server.target());
    ASSERT_TRUE(answer.ok()) << listen << ": " << answer.status();
    ASSERT_EQ(answer->size(), 2u);
    EXPECT_TRUE(absl::StartsWith((*answer)[0], "fd:")) << (*answer)[0];
    EXPECT_EQ((*answer)[1], Expected(getuid(), getgid(), getpid())) << listen;
  }
}

TEST(ListenerTest, TcpLoopbackPeerIsThisUser) {
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0", "[::1]:0"}) {
    PeerServer server(listen);
    if (std::string(listen) == "[::1]:0" &&
        absl::StrContains(server.status().message(), "not an address of this host")) {
      continue;  // no IPv6 here
    }
    ASSERT_TRUE(server.status().ok()) << listen << ": " << server.status();
    absl::StatusOr<std::vector<std::string>> answer = AskPeer(server.target());
    ASSERT_TRUE(answer.ok()) << listen << ": " << answer.status();
    ASSERT_EQ(answer->size(), 2u);
    EXPECT_TRUE(absl::StartsWith((*answer)[0], "ipv")) << (*answer)[0];
    EXPECT_EQ((*answer)[1], Expected(geteuid())) << listen << ", peer " << (*answer)[0];
  }
}

TEST(ListenerTest, OtherPeersAreUnknown) {
  PeerServer server("127.0.0.1:0");
  ASSERT_TRUE(server.status().ok()) << server.status();
  for (const char* peer : {"unix:", "fd:99999", "ipv4:10.1.2.3:40000", "ipv4:127.0.0.1:1",
                           "ipv6:%5B::1%5D:1", "garbage", ""}) {
    EXPECT_EQ(server.listener().Find(peer).DebugString(), "unknown") << peer;
  }
}

TEST(ListenerTest, PortInUseIsRefused) {
  PeerServer first("127.0.0.1:0");
  ASSERT_TRUE(first.status().ok()) << first.status();
  absl::StatusOr<std::unique_ptr<Listener>> second =
      Listener::Bind(absl::StrCat("127.0.0.1:", first.listener().port()), {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use")) << second.status();
  EXPECT_EQ(Listener::Bind("192.0.2.1:0", {}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Listener::Bind("127.0.0.1:x", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// True when the peer closes `fd` within `limit`.
bool ClosedByPeer(int fd, absl::Duration limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(limit))) <= 0) return false;
  char byte = 0;
  return read(fd, &byte, 1) <= 0;
}

TEST(ListenerTest, StopRefusesConnectionsAndRemovesTheSocketFile) {
  const std::string path = MakeTempDir("listener-stop") + "/ks.sock";
  PeerServer unix_server("unix:" + path);
  PeerServer tcp_server("127.0.0.1:0");
  ASSERT_TRUE(unix_server.status().ok() && tcp_server.status().ok());
  ASSERT_TRUE(AskPeer(tcp_server.target()).ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  unix_server.listener().Stop();
  tcp_server.listener().Stop();
  EXPECT_FALSE(std::filesystem::exists(path));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(tcp_server.listener().port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(errno, ECONNREFUSED);
  close(fd);
}

TEST(ListenerTest, AcceptsAgainWhenDescriptorsFreeUp) {
  PeerServer server("127.0.0.1:0");
  ASSERT_TRUE(server.status().ok()) << server.status();
  constexpr int kClients = 3;
  std::vector<int> clients(kClients);
  for (int& fd : clients) fd = socket(AF_INET, SOCK_STREAM, 0);

  // This process runs out of descriptors: the listener's accept fails with EMFILE.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  int exhausted = 0;
  for (int round = 0; round < 2; ++round) {  // again after gRPC's closes in flight settle
    for (int fd = open("/dev/null", O_RDONLY | O_CLOEXEC); fd >= 0;
         fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) {
      filler.push_back(fd);
    }
    exhausted = errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Each new connection is closed at once, not left waiting in the accept queue.
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server.listener().port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<bool> closed;
  for (int fd : clients) {
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    closed.push_back(ClosedByPeer(fd, absl::Seconds(5)));
  }
  for (int fd : filler) close(fd);
  setrlimit(RLIMIT_NOFILE, &saved);
  for (int fd : clients) close(fd);

  EXPECT_EQ(exhausted, EMFILE);
  for (int i = 0; i < kClients; ++i) EXPECT_TRUE(closed[i]) << "client " << i;
  const ListenerStats stats = server.listener().stats();
  EXPECT_EQ(stats.shed, kClients);
  EXPECT_EQ(stats.bursts, 1);  // logged once
  // Descriptors free again: calls are served.
  absl::StatusOr<std::vector<std::string>> answer = AskPeer(server.target());
  EXPECT_TRUE(answer.ok()) << answer.status();
}

// Descriptors this process has open.
int OpenDescriptors() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

TEST(ListenerTest, LeavesNoDescriptorsBehind) {
  const std::string dir = MakeTempDir("listener-fds");
  {
    PeerServer warm_up("127.0.0.1:0");  // gRPC's own descriptors, made once per process
    ASSERT_TRUE(AskPeer(warm_up.target()).ok());
  }
  const int before = OpenDescriptors();
  {
    PeerServer tcp("127.0.0.1:0");
    PeerServer unix_socket("unix:" + dir + "/ks.sock");
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(AskPeer(tcp.target()).ok());
      ASSERT_TRUE(AskPeer(unix_socket.target()).ok());
    }
  }
  int after = OpenDescriptors();
  for (int i = 0; i < 100 && after > before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = OpenDescriptors();
  }
  EXPECT_LE(after, before);
}

}  // namespace
}  // namespace kernelserve::server
