// kernelserve-server's own listener: it accepts again once descriptors free up after running
// out of them, refuses clients at once while out of them, closes connections idle or old past
// --max-connection-idle and --max-connection-age, and serves Unix sockets and IPv6 loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

// A TCP connection to 127.0.0.1:`port`; -1 when it cannot be made.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Writes the HTTP/2 client preface and an empty SETTINGS frame: a client that then goes quiet.
bool SendHttp2Preface(int fd) {
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const std::string settings("\0\0\0\4\0\0\0\0\0", 9);  // length 0, type SETTINGS, stream 0
  const std::string bytes = preface + settings;
  return write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

struct Closing {
  bool closed = false;  // the server closed the connection
  bool goaway = false;  // after sending a GOAWAY frame
  absl::Duration after;
};

// Reads the server's HTTP/2 frames on `fd` until it closes the connection or `limit` passes.
Closing ReadUntilClosed(int fd, absl::Duration limit) {
  constexpr uint8_t kGoAway = 7;
  Closing closing;
  std::string bytes;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) {
      closing.closed = true;
      break;
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  closing.after = absl::Now() - start;
  // Frames: a 9-byte header (24-bit length, type, flags, stream) and the payload.
  for (size_t at = 0; at + 9 <= bytes.size();) {
    const size_t length = (static_cast<uint8_t>(bytes[at]) << 16) |
                          (static_cast<uint8_t>(bytes[at + 1]) << 8) |
                          static_cast<uint8_t>(bytes[at + 2]);
    closing.goaway = closing.goaway || static_cast<uint8_t>(bytes[at + 3]) == kGoAway;
    at += 9 + length;
  }
  return closing;
}

// A small mean_pooling Execute on a fresh channel to `address`.
grpc::Status SmallCall(const std::string& address, std::chrono::milliseconds timeout) {
  const Tensor x = RandomTensor(DType::kF32, {1, 4, 8}, 7);
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  return MakeStub(address)->Execute(&context, MeanPoolingRequest(x), &response);
}

// SmallCall until it succeeds or `limit` passes; the last status.
grpc::Status CallUntilServed(const std::string& address, absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  grpc::Status status;
  do {
    status = SmallCall(address, std::chrono::seconds(2));
    if (status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (absl::Now() < give_up);
  return status;
}

TEST(ServerListenerTest, AcceptsAgainAfterRunningOutOfDescriptors) {
  constexpr int kFileLimit = 256;
  ServerProcess server;
  server.set_file_limit(kFileLimit);
  ASSERT_TRUE(server.Start({"--cache=memory"}).ok());
  EXPECT_TRUE(absl::StrContains(server.startup_line(), absl::StrCat("; fds ", kFileLimit)))
      << server.startup_line();
  ASSERT_TRUE(SmallCall(server.address(), std::chrono::seconds(5)).ok());

  // More connections than the server has descriptors for.
  std::vector<int> flood;
  for (int i = 0; i < kFileLimit + 150; ++i) {
    const int fd = ConnectLoopback(server.port());
    if (fd >= 0) flood.push_back(fd);
  }
  ASSERT_GT(flood.size(), static_cast<size_t>(kFileLimit)) << "the test could not connect";
  // Out of descriptors, the server refuses a new client at once instead of leaving it waiting
  // in the accept queue.
  const absl::Time start = absl::Now();
  const grpc::Status refused = SmallCall(server.address(), std::chrono::seconds(5));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  // The connections close and free the server's descriptors: it serves fresh clients again.
  for (int fd : flood) close(fd);
  const grpc::Status served = CallUntilServed(server.address(), absl::Seconds(15));
  EXPECT_TRUE(served.ok()) << served.error_code() << ": " << served.error_message();
  EXPECT_EQ(HealthStatus(server.address(), "").value_or(-1), 1);
  absl::StatusOr<int> code = server.Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

// How a server started with `args` closes a connection that sends the HTTP/2 preface and then
// nothing, watched for `wait`.
Closing ClosingOfAnIdleConnection(const std::vector<std::string>& args, absl::Duration wait) {
  ServerProcess server;
  EXPECT_TRUE(server.Start(args).ok());
  const int fd = ConnectLoopback(server.port());
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(SendHttp2Preface(fd));
  const Closing closing = ReadUntilClosed(fd, wait);
  close(fd);
  return closing;
}

TEST(ServerListenerTest, IdleConnectionIsClosedAfterMaxConnectionIdle) {
  const Closing closing =
      ClosingOfAnIdleConnection({"--cache=memory", "--max-connection-idle=1s"}, absl::Seconds(10));
  EXPECT_TRUE(closing.closed);
  EXPECT_TRUE(closing.goaway);
  EXPECT_GE(closing.after, absl::Milliseconds(800));
  EXPECT_LT(closing.after, absl::Seconds(5));
}

TEST(ServerListenerTest, ConnectionIsClosedAfterMaxConnectionAgeAndGrace) {
  const Closing closing =
      ClosingOfAnIdleConnection({"--cache=memory", "--max-connection-idle=0",
                                 "--max-connection-age=1s", "--max-connection-age-grace=1s"},
                                absl::Seconds(10));
  EXPECT_TRUE(closing.closed);
  EXPECT_TRUE(closing.goaway);
  EXPECT_GE(closing.after, absl::Milliseconds(800));  // the age, less gRPC's 10% jitter
  EXPECT_LT(closing.after, absl::Seconds(6));
}

TEST(ServerListenerTest, NoIdleLimitKeepsAnIdleConnectionOpen) {
  const Closing closing =
      ClosingOfAnIdleConnection({"--cache=memory", "--max-connection-idle=0"}, absl::Seconds(2));
  EXPECT_FALSE(closing.closed);
}

TEST(ServerListenerTest, UnixSocketServesAndIsRemovedOnShutdown) {
  const std::string path = MakeTempDir("listener-unix") + "/kernelserve.sock";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--listen=unix:" + path}).ok());
  EXPECT_EQ(server.address(), "unix:" + path);
  const grpc::Status status = SmallCall(server.address(), std::chrono::seconds(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(HealthStatus(server.address(), "").value_or(-1), 1);
  absl::StatusOr<int> code = server.Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ServerListenerTest, AbstractUnixSocketServes) {
  const std::string name = absl::StrCat("kernelserve-test-", getpid());
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--listen=unix-abstract:" + name}).ok());
  EXPECT_EQ(server.address(), "unix-abstract:" + name);
  const grpc::Status status = SmallCall(server.address(), std::chrono::seconds(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(ServerListenerTest, Ipv6LoopbackServes) {
  ServerProcess server;
  const absl::Status started = server.Start({"--cache=memory", "--listen=[::1]:0"});
  if (!started.ok() && absl::StrContains(started.message(), "not an address of this host")) {
    GTEST_SKIP() << "no IPv6 loopback here: " << started;
  }
  ASSERT_TRUE(started.ok()) << started;
  EXPECT_TRUE(absl::StrContains(server.startup_line(), absl::StrCat("[::1]:", server.port())))
      << server.startup_line();
  EXPECT_EQ(server.address(), absl::StrCat("[::1]:", server.port()));
  const grpc::Status status = SmallCall(server.address(), std::chrono::seconds(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace kernelserve::testing
