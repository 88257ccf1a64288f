#include "tests/client/e2e/client_fixture.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/time/clock.h"

namespace kernelserve {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

pid_t ClientServerTest::pid_ = -1;
Client* ClientServerTest::client_ = nullptr;

void ClientServerTest::SetUpTestSuite() {
  const char* server = std::getenv("KERNELSERVE_SERVER");
  ASSERT_NE(server, nullptr) << "set KERNELSERVE_SERVER to the kernelserve-server binary";
  const std::string target = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<std::string> args = {server, "--listen=" + target, "--metrics-listen=off",
                                   "--cache=memory"};
  // As root (CI machines) a server serves system shared memory only when told to.
  if (geteuid() == 0) args.push_back("--shared-memory-as-root");
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ClientOptions options;
  options.target = target;
  // Generous: DeadlineExceeded's abandoned call keeps the CPU worker busy a while after it,
  // several times longer under the sanitizers (make test-asan, make test-tsan).
  options.deadline = absl::Seconds(30);
  client_ = Client::Connect(options).value().release();
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    absl::StatusOr<HealthStatus> health = client_->Health();
    if (health.ok() && *health == HealthStatus::kServing) return;
    ASSERT_EQ(waitpid(pid_, nullptr, WNOHANG), 0) << "kernelserve-server exited";
    absl::SleepFor(absl::Milliseconds(100));
  }
  FAIL() << "kernelserve-server is not SERVING after 30 s";
}

void ClientServerTest::TearDownTestSuite() {
  delete client_;
  client_ = nullptr;
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

std::vector<double> MeanOverRows(const Tensor& x) {
  const int64_t B = x.dim(0), S = x.dim(1), H = x.dim(2);
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> out(B * H, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) out[b * H + h] += v[(b * S + s) * H + h] / S;
    }
  }
  return out;
}

}  // namespace kernelserve
