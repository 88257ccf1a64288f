// Test helpers for the server suite: the kernelserve-server binary as a child process, plain
// gRPC stubs to it, /metrics over HTTP, and request builders.
#ifndef KERNELSERVE_TESTS_SERVER_SERVER_PROCESS_H_
#define KERNELSERVE_TESTS_SERVER_SERVER_PROCESS_H_

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "proto/kernel_service_grpc.h"

namespace kernelserve::testing {

// Path of the server binary under test: $KERNELSERVE_SERVER_BINARY, else the one built here.
std::string ServerBinary();

// A kernelserve-server child process. Listens on free ports unless `args` name --listen or
// --metrics-listen. Thread safety: not thread-safe.
class ServerProcess {
 public:
  // Runs `binary` (default: ServerBinary()).
  explicit ServerProcess(std::string binary = ServerBinary()) : binary_(std::move(binary)) {}
  // SIGKILL when still running.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the binary with `args` and waits (10 s) for its startup line. Internal with the
  // process's exit code when it stops before printing it.
  absl::Status Start(const std::vector<std::string>& args);
  // Sends `signal`, waits up to `timeout` for the exit and returns the exit code (SIGKILL and
  // DeadlineExceeded after the timeout; Internal when killed by a signal).
  absl::StatusOr<int> Stop(int signal = SIGTERM, absl::Duration timeout = absl::Seconds(30));
  // Sends `signal` without waiting.
  void Signal(int signal) const;
  // The next Start runs the binary with RLIMIT_NOFILE's soft and hard limits at `limit`
  // (0, the default: as this process has them).
  void set_file_limit(int limit) { file_limit_ = limit; }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }  // -1 when not running
  int port() const { return port_; }  // 0 when listening on a Unix socket
  int metrics_port() const { return metrics_port_; }
  // The gRPC target of the server: "127.0.0.1:PORT" ("[::1]:PORT" when listening there), or
  // "unix:PATH" / "unix-abstract:NAME" as --listen named it.
  const std::string& address() const { return address_; }
  const std::string& startup_line() const { return startup_line_; }

 private:
  const std::string binary_;
  pid_t pid_ = -1;
  int file_limit_ = 0;
  int stdout_fd_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string address_;
  std::string startup_line_;
};

// A stub on a plaintext channel that sends and receives messages of any size.
std::unique_ptr<v1::KernelService::Stub> MakeStub(const std::string& address);

// The grpc.health.v1 status of `service` ("" = the whole server): 1 SERVING, 2 NOT_SERVING;
// the call's error otherwise. `token` non-empty adds "authorization: Bearer <token>".
absl::StatusOr<int> HealthStatus(const std::string& address, const std::string& service,
                                 const std::string& token = "");

// The body of GET http://127.0.0.1:<port><path>.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);
// The status code and body of GET http://127.0.0.1:<port><path> with `headers` ("Name: value").
struct HttpResponse {
  int status = 0;
  std::string body;
};
absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& path,
                                         const std::vector<std::string>& headers = {});
// Sum of the samples of metric `name` whose line contains every one of `labels` (e.g.
// {"code=\"OK\""}); 0 when there is none.
double MetricSum(const std::string& text, const std::string& name,
                 const std::vector<std::string>& labels = {});
// Runs `promtool check metrics` on `text`; its exit code, with its output in *output.
int PromtoolCheck(const std::string& text, std::string* output);

// Copies `tensor` into a wire tensor.
v1::Tensor ToWire(const Tensor& tensor);
// A mean_pooling request for x (and request_id).
v1::ExecuteRequest MeanPoolingRequest(const Tensor& x, const std::string& request_id = "");
// The mean over S of x [B,S,H] in double: [B*H] values.
std::vector<double> MeanPoolingReference(const Tensor& x);
// Values of a wire tensor as doubles (f32 only).
std::vector<double> WireDoubles(const v1::Tensor& tensor);

// A reference to `bytes` bytes at `offset` of shared-memory region `region`.
v1::TensorRef RegionRef(const std::string& region, uint64_t offset, uint64_t bytes);

// A POSIX shared-memory object of `bytes` zero bytes, created under a fresh key and mapped
// here; unmapped and unlinked on destruction. Thread safety: not thread-safe.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes);
  ~ShmObject();
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& key() const { return key_; }  // "/kernelserve-test-PID-N"
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  // Cuts (or grows) the object to `bytes` (ftruncate), as a client may at any time. The bytes of
  // data() past them must not be touched here while it is shorter.
  void Resize(size_t bytes) const;

 private:
  std::string key_;
  size_t bytes_;
  char* data_ = nullptr;
};

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);

// Runs the program `argv` (argv[0] its path) as user `uid` and group `gid` (REQUIRES: this
// process runs as root), waits for it (60 s at most, then SIGKILL), and returns its exit code
// with its stdout and stderr in *output; Internal when it did not exit by itself.
absl::StatusOr<int> RunAs(uid_t uid, gid_t gid, const std::vector<std::string>& argv,
                          std::string* output);
// A copy of `binary` in a fresh directory any user may read and run (the build tree may sit
// under a private home directory).
std::string PublicCopy(const std::string& binary);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SERVER_SERVER_PROCESS_H_
