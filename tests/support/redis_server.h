// RedisServerProcess: a private redis-server child process for tests.
#ifndef KERNELSERVE_TESTS_SUPPORT_REDIS_SERVER_H_
#define KERNELSERVE_TESTS_SUPPORT_REDIS_SERVER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kernelserve::testing {

// Runs `redis-server --port P --save "" --appendonly no --bind 127.0.0.1` on a free port, with
// nothing persisted. Typical use:
//
//   RedisServerProcess redis;
//   absl::Status started = redis.Start();
//   if (absl::IsNotFound(started)) GTEST_SKIP() << started.message();
//   ASSERT_TRUE(started.ok()) << started;
//
// Thread safety: not thread-safe; use from one thread.
class RedisServerProcess {
 public:
  RedisServerProcess() = default;
  // Stops the server when running.
  ~RedisServerProcess();
  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  // Path of redis-server on $PATH or /usr/bin/redis-server; "" when not installed.
  static std::string FindBinary();

  // Picks a free port, starts the server and waits (up to 5 s) until it answers PING.
  // NotFound when redis-server is not installed (callers skip their test); FailedPrecondition
  // when already running; DeadlineExceeded or Internal when it does not come up.
  absl::Status Start();
  // SIGTERM, then waits for the process to exit (SIGKILL after 5 s). OK when not running.
  absl::Status Stop();
  // Stop, then start again on the same port (an empty database).
  absl::Status Restart();
  // SIGSTOP / SIGCONT: a paused server accepts connections but never answers, which is how a
  // hung Redis looks to a client.
  absl::Status Pause();
  absl::Status Resume();

  bool running() const { return pid_ > 0; }
  // The port; 0 before the first Start.
  int port() const { return port_; }
  // "redis://127.0.0.1:<port>/0".
  std::string url() const;

  // Sends one command on a fresh connection (database 0) and returns the reply as text: the
  // status text ("OK"), the integer's digits, or the bulk string. NotFound for a nil reply,
  // FailedPrecondition carrying the message of an error reply, Unimplemented for array
  // replies, Unavailable when the server does not answer within `timeout_ms`.
  absl::StatusOr<std::string> Command(const std::vector<std::string>& args,
                                      int timeout_ms = 2000) const;

 private:
  // Launches on port_ and waits for PING.
  absl::Status Launch(const std::string& binary);

  pid_t pid_ = -1;
  int port_ = 0;
  bool paused_ = false;
};

// True when a redis server answers PING with PONG on 127.0.0.1:port within `timeout_ms`.
bool RedisAnswersPing(int port, int timeout_ms);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_REDIS_SERVER_H_
