#include "tests/server/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/convert.h"

namespace kernelserve::testing {
namespace {

// A sync gRPC client reads an idle connection only from its backup poller (every 5 s by
// default), so a server draining on SIGTERM would wait that long for the client to take its
// GOAWAY. Tests poll often instead; set before gRPC starts.
const bool kFastClientPoll = [] {
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50", /*overwrite=*/0);
  return true;
}();

// The port of the address after `marker` ("listening on 127.0.0.1:PORT", "on [::1]:PORT").
int PortAfter(const std::string& line, const std::string& marker) {
  const size_t at = line.find(marker);
  if (at == std::string::npos) return 0;
  size_t host_end = at + marker.size();
  if (line.compare(host_end, 1, "[") == 0) host_end = line.find(']', host_end);
  if (host_end == std::string::npos) return 0;
  size_t colon = line.find(':', host_end);
  if (colon == std::string::npos) return 0;
  size_t end = colon + 1;
  while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
  int port = 0;
  return absl::SimpleAtoi(line.substr(colon + 1, end - colon - 1), &port) ? port : 0;
}

bool HasFlag(const std::vector<std::string>& args, const std::string& name) {
  for (const std::string& a : args) {
    if (absl::StartsWith(a, name + "=") || a == name) return true;
  }
  return false;
}

}  // namespace

std::string ServerBinary() {
  // KERNELSERVE_SERVER_BINARY in the environment runs the suite against another build.
  const char* other = std::getenv("KERNELSERVE_SERVER_BINARY");
  return other != nullptr && *other != '\0' ? other : KERNELSERVE_SERVER_BINARY;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::Status ServerProcess::Start(const std::vector<std::string>& args) {
  if (pid_ > 0) return absl::FailedPreconditionError("already running");
  std::vector<std::string> all = {binary_};
  if (!HasFlag(args, "--listen")) all.push_back("--listen=127.0.0.1:0");
  if (!HasFlag(args, "--metrics-listen")) all.push_back("--metrics-listen=127.0.0.1:0");
  // The suites run as root on CI machines, where a server serves no system shared memory
  // unless told to (each registration is still checked against the caller's access).
  if (geteuid() == 0 && !HasFlag(args, "--shared-memory-as-root")) {
    all.push_back("--shared-memory-as-root");
  }
  all.insert(all.end(), args.begin(), args.end());
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    if (file_limit_ > 0) {
      const rlimit limit = {static_cast<rlim_t>(file_limit_), static_cast<rlim_t>(file_limit_)};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
    }
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = fds[0];
  std::string text;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buffer[512];
      const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
      if (n > 0) text.append(buffer, static_cast<size_t>(n));
    }
    const size_t newline = text.find('\n');
    if (newline != std::string::npos) {
      startup_line_ = text.substr(0, newline);
      metrics_port_ = PortAfter(startup_line_, "metrics on ");
      // "listening on unix:PATH (...)" (or unix-abstract:NAME) names a Unix socket; else
      // "listening on HOST:PORT (...)".
      const std::string listening = "listening on ";
      const size_t at = startup_line_.find(listening);
      if (at != std::string::npos && startup_line_.compare(at + listening.size(), 4, "unix") == 0) {
        const size_t begin = at + listening.size();
        port_ = 0;
        address_ = startup_line_.substr(begin, startup_line_.find(" (", begin) - begin);
        return absl::OkStatus();
      }
      port_ = PortAfter(startup_line_, listening);
      if (port_ == 0) return absl::InternalError("bad startup line: " + startup_line_);
      const bool ipv6_loopback = startup_line_.compare(at + listening.size(), 6, "[::1]:") == 0;
      address_ = absl::StrCat(ipv6_loopback ? "[::1]:" : "127.0.0.1:", port_);
      return absl::OkStatus();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("the server exited with ", WEXITSTATUS(status), " before starting: ", text));
    }
  }
  return absl::DeadlineExceededError("no startup line within 10 s: " + text);
}

void ServerProcess::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<int> ServerProcess::Stop(int signal, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  kill(pid_, signal);
  const absl::Time give_up = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > give_up) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return absl::DeadlineExceededError("the server did not exit in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat("killed by signal ", WTERMSIG(status)));
  }
  return WEXITSTATUS(status);
}

std::unique_ptr<v1::KernelService::Stub> MakeStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return v1::KernelService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

absl::StatusOr<int> HealthStatus(const std::string& address, const std::string& service,
                                 const std::string& token) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return static_cast<int>(response.status());
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  absl::StatusOr<HttpResponse> response = HttpRequest(port, path);
  if (!response.ok()) return response.status();
  return response->body;
}

absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& path,
                                         const std::vector<std::string>& headers) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to port ", port));
  }
  std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
  for (const std::string& header : headers) absl::StrAppend(&request, header, "\r\n");
  request += "\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("write failed");
  }
  std::string response;
  char buffer[8192];
  ssize_t n = 0;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0)
    response.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("no HTTP body: " + response);
  HttpResponse out;
  // "HTTP/1.1 200 OK": the code after the first space.
  const size_t space = response.find(' ');
  if (space != std::string::npos) out.status = std::atoi(response.c_str() + space + 1);
  out.body = response.substr(body + 4);
  return out;
}

double MetricSum(const std::string& text, const std::string& name,
                 const std::vector<std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    const absl::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;
    bool match = true;
    for (const std::string& label : labels) match = match && absl::StrContains(line, label);
    if (!match) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) sum += value;
  }
  return sum;
}

int PromtoolCheck(const std::string& text, std::string* output) {
  const std::string dir = MakeTempDir("promtool");
  const std::string in = dir + "/metrics.txt";
  const std::string out = dir + "/out.txt";
  std::ofstream(in) << text;
  const int rc =
      std::system(absl::StrCat("promtool check metrics < ", in, " > ", out, " 2>&1").c_str());
  std::stringstream s;
  s << std::ifstream(out).rdbuf();
  *output = s.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

v1::Tensor ToWire(const Tensor& tensor) {
  v1::Tensor wire;
  PutTensor(tensor, &wire);
  return wire;
}

v1::ExecuteRequest MeanPoolingRequest(const Tensor& x, const std::string& request_id) {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  (*request.mutable_inputs())["x"] = ToWire(x);
  request.set_request_id(request_id);
  return request;
}

std::vector<double> MeanPoolingReference(const Tensor& x) {
  const int64_t B = x.dim(0), S = x.dim(1), H = x.dim(2);
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> out(static_cast<size_t>(B * H), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) out[b * H + h] += v[(b * S + s) * H + h];
    }
  }
  for (double& o : out) o /= static_cast<double>(S);
  return out;
}

std::vector<double> WireDoubles(const v1::Tensor& tensor) {
  std::vector<double> out(tensor.data().size() / sizeof(float));
  for (size_t i = 0; i < out.size(); ++i) {
    float f = 0;
    std::memcpy(&f, tensor.data().data() + i * sizeof(float), sizeof(float));
    out[i] = f;
  }
  return out;
}

absl::StatusOr<int> RunAs(uid_t uid, gid_t gid, const std::vector<std::string>& argv,
                          std::string* output) {
  const std::string dir = MakeTempDir("run-as");
  const std::string log = dir + "/output.txt";
  const int log_fd = open(log.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (log_fd < 0) return absl::InternalError("cannot create " + log);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    if (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0 || setgroups(0, nullptr) != 0 ||
        setgid(gid) != 0 || setuid(uid) != 0) {
      _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  if (pid < 0) return absl::InternalError("fork failed");
  int status = 0;
  for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) == 0; waited_ms += 10) {
    if (waited_ms > 60000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::InternalError("killed after 60 s");
    }
    usleep(10000);
  }
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  *output = text.str();
  if (!WIFEXITED(status)) return absl::InternalError("did not exit: " + *output);
  return WEXITSTATUS(status);
}

std::string PublicCopy(const std::string& binary) {
  const std::string dir = MakeTempDir("public");
  chmod(dir.c_str(), 0755);
  const std::string copy = dir + "/" + binary.substr(binary.rfind('/') + 1);
  std::ifstream in(binary, std::ios::binary);
  std::ofstream(copy, std::ios::binary) << in.rdbuf();
  chmod(copy.c_str(), 0755);
  return copy;
}

v1::TensorRef RegionRef(const std::string& region, uint64_t offset, uint64_t bytes) {
  v1::TensorRef ref;
  ref.set_region(region);
  ref.set_offset(offset);
  ref.set_byte_size(bytes);
  return ref;
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base != nullptr ? base : "/tmp", "/ks-", name, "-XXXXXX");
  char* made = mkdtemp(templ.data());
  return made != nullptr ? std::string(made) : std::string("/tmp");
}

void ShmObject::Resize(size_t bytes) const {
  const int fd = shm_open(key_.c_str(), O_RDWR, 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ADD_FAILURE() << "ftruncate " << key_ << ": " << std::strerror(errno);
  }
  if (fd >= 0) close(fd);
}

ShmObject::ShmObject(size_t bytes) : bytes_(bytes) {
  static std::atomic<int> counter{0};
  key_ = "/kernelserve-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ADD_FAILURE() << "shm_open/ftruncate " << key_ << ": " << std::strerror(errno);
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (map == MAP_FAILED) {
    ADD_FAILURE() << "mmap " << key_ << ": " << std::strerror(errno);
    map = nullptr;
  }
  data_ = static_cast<char*>(map);
}

ShmObject::~ShmObject() {
  if (data_ != nullptr) munmap(data_, bytes_);
  shm_unlink(key_.c_str());
}

}  // namespace kernelserve::testing
