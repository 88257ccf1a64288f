#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kernelserve::testing {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(5);
constexpr absl::Duration kStopTimeout = absl::Seconds(5);

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A port nobody listens on right now (the kernel's pick for port 0); 0 on failure.
int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Waits until `fd` is ready for `events` or `deadline` passes.
bool WaitFor(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(ms));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Connects to 127.0.0.1:port; -1 on failure or timeout.
int ConnectLoopback(int port, absl::Time deadline) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = Loopback(port);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc == 0 || (errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline))) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
  }
  close(fd);
  return -1;
}

bool SendAll(int fd, std::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return false;
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (n > 0) data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until `buffer` holds at least `size` bytes.
bool ReadUntilSize(int fd, std::string* buffer, size_t size, absl::Time deadline) {
  while (buffer->size() < size) {
    if (!WaitFor(fd, POLLIN, deadline)) return false;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
    if (n > 0) buffer->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Reads one RESP reply (not arrays) from `fd`.
absl::StatusOr<std::string> ReadReply(int fd, absl::Time deadline) {
  std::string buffer;
  size_t eol;
  while ((eol = buffer.find("\r\n")) == std::string::npos) {
    if (!ReadUntilSize(fd, &buffer, buffer.size() + 1, deadline)) {
      return absl::UnavailableError("redis-server did not answer");
    }
  }
  const char type = buffer[0];
  std::string line = buffer.substr(1, eol - 1);
  switch (type) {
    case '+':
    case ':':
      return line;
    case '-':
      return absl::FailedPreconditionError(line);
    case '$': {
      const long len = std::strtol(line.c_str(), nullptr, 10);
      if (len < 0) return absl::NotFoundError("nil reply");
      const size_t end = eol + 2 + static_cast<size_t>(len);
      if (!ReadUntilSize(fd, &buffer, end + 2, deadline)) {
        return absl::UnavailableError("redis-server cut a bulk reply short");
      }
      return buffer.substr(eol + 2, static_cast<size_t>(len));
    }
    default:
      return absl::UnimplementedError(absl::StrCat("reply type '", std::string(1, type), "'"));
  }
}

}  // namespace

absl::StatusOr<std::string> RedisServerProcess::Command(const std::vector<std::string>& args,
                                                        int timeout_ms) const {
  if (port_ == 0) return absl::FailedPreconditionError("redis-server was never started");
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  std::string request = absl::StrCat("*", args.size(), "\r\n");
  for (const std::string& arg : args)
    absl::StrAppend(&request, "$", arg.size(), "\r\n", arg, "\r\n");
  const int fd = ConnectLoopback(port_, deadline);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to port ", port_));
  absl::StatusOr<std::string> reply = SendAll(fd, request, deadline)
                                          ? ReadReply(fd, deadline)
                                          : absl::UnavailableError("cannot send the command");
  close(fd);
  return reply;
}

bool RedisAnswersPing(int port, int timeout_ms) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  const int fd = ConnectLoopback(port, deadline);
  if (fd < 0) return false;
  const bool ok =
      SendAll(fd, "PING\r\n", deadline) && ReadReply(fd, deadline).value_or("") == "PONG";
  close(fd);
  return ok;
}

RedisServerProcess::~RedisServerProcess() { (void)Stop(); }

std::string RedisServerProcess::FindBinary() {
  const char* path = std::getenv("PATH");
  if (path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/redis-server");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  if (access("/usr/bin/redis-server", X_OK) == 0) return "/usr/bin/redis-server";
  return "";
}

std::string RedisServerProcess::url() const {
  return absl::StrCat("redis://127.0.0.1:", port_, "/0");
}

absl::Status RedisServerProcess::Start() {
  if (running()) return absl::FailedPreconditionError("redis-server is already running");
  const std::string binary = FindBinary();
  if (binary.empty()) {
    return absl::NotFoundError("redis-server not found on $PATH or at /usr/bin/redis-server");
  }
  absl::Status status = absl::InternalError("no free port found");
  for (int attempt = 0; attempt < 3; ++attempt) {  // another process may take the port first
    port_ = PickFreePort();
    if (port_ == 0) continue;
    status = Launch(binary);
    if (status.ok()) return status;
  }
  return status;
}

absl::Status RedisServerProcess::Launch(const std::string& binary) {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {binary,         "--port", port,     "--save",   "",
                                   "--appendonly", "no",     "--bind", "127.0.0.1"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return absl::InternalError("cannot open /dev/null");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(devnull);
    return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // no stray servers when the test binary dies
    if (getppid() != parent) _exit(126);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(devnull);
  pid_ = pid;
  paused_ = false;
  const absl::Time deadline = absl::Now() + kStartTimeout;
  while (absl::Now() < deadline) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("redis-server on port ", port_,
                                              " exited at start (wait status ", wstatus, ")"));
    }
    if (RedisAnswersPing(port_, 100)) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(20));
  }
  (void)Stop();
  return absl::DeadlineExceededError(
      absl::StrCat("redis-server on port ", port_, " did not answer PING within 5 s"));
}

absl::Status RedisServerProcess::Stop() {
  if (!running()) return absl::OkStatus();
  kill(pid_, SIGTERM);
  if (paused_) kill(pid_, SIGCONT);
  paused_ = false;
  const absl::Time deadline = absl::Now() + kStopTimeout;
  for (;;) {
    int wstatus = 0;
    pid_t rc = waitpid(pid_, &wstatus, WNOHANG);
    if (rc == pid_ || (rc < 0 && errno == ECHILD)) break;
    if (absl::Now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &wstatus, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status RedisServerProcess::Restart() {
  if (port_ == 0) return absl::FailedPreconditionError("Restart before Start");
  const std::string binary = FindBinary();
  if (binary.empty()) return absl::NotFoundError("redis-server not found");
  if (absl::Status stopped = Stop(); !stopped.ok()) return stopped;
  return Launch(binary);
}

absl::Status RedisServerProcess::Pause() {
  if (!running()) return absl::FailedPreconditionError("redis-server is not running");
  if (kill(pid_, SIGSTOP) != 0) return absl::InternalError("SIGSTOP failed");
  paused_ = true;
  return absl::OkStatus();
}

absl::Status RedisServerProcess::Resume() {
  if (!running()) return absl::FailedPreconditionError("redis-server is not running");
  if (kill(pid_, SIGCONT) != 0) return absl::InternalError("SIGCONT failed");
  paused_ = false;
  return absl::OkStatus();
}

}  // namespace kernelserve::testing
