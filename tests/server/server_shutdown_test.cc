// kernelserve-server under load: SIGTERM drains accepted calls, queue limits and deadlines.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

// A flash_attention call that takes a while on the CPU (about 4 * S * S * 64 * 4 flops).
v1::ExecuteRequest SlowRequest(uint64_t seed, int64_t S = 512) {
  AttentionInputsOptions options;
  options.B = 1;
  options.Sq = S;
  options.Sk = S;
  options.Hq = 4;
  options.Hkv = 4;
  options.D = 64;
  options.seed = seed;
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  for (const auto& [name, tensor] : RandomAttentionInputs(options)) {
    (*request.mutable_inputs())[name] = ToWire(tensor);
  }
  request.mutable_flash_attention()->set_causal(true);
  return request;
}

grpc::Status Call(const std::string& address, const v1::ExecuteRequest& request,
                  v1::ExecuteResponse* response, std::chrono::milliseconds timeout) {
  auto stub = MakeStub(address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  return stub->Execute(&context, request, response);
}

// Polls /metrics until `name` sums to at least `value` (10 s).
bool WaitForMetric(const ServerProcess& server, const std::string& name, double value,
                   const std::vector<std::string>& labels = {}) {
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> text = HttpGet(server.metrics_port(), "/metrics");
    if (text.ok() && MetricSum(*text, name, labels) >= value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ServerShutdownTest, SigtermDuringLoadFinishesEveryAcceptedCall) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--grace-period=60s"}).ok());
  constexpr int kAccepted = 6;
  std::vector<grpc::Status> statuses(kAccepted);
  std::vector<v1::ExecuteResponse> responses(kAccepted);
  std::vector<std::thread> threads;
  for (int i = 0; i < kAccepted; ++i) {
    threads.emplace_back([&, i] {
      statuses[i] = Call(server.address(), SlowRequest(static_cast<uint64_t>(i), 1024),
                         &responses[i], std::chrono::seconds(60));
    });
  }
  // Every call is accepted (held by the server) before the signal.
  ASSERT_TRUE(WaitForMetric(server, "kernelserve_inflight_requests", kAccepted));
  // More load keeps arriving while the server drains: each is accepted and answered, or
  // refused as UNAVAILABLE, never lost half way.
  std::atomic<bool> stop{false};
  std::atomic<int> late_ok{0};
  std::vector<grpc::Status> late_failures;
  std::thread late([&] {
    while (!stop) {
      v1::ExecuteResponse response;
      grpc::Status s = Call(server.address(), SlowRequest(99), &response, std::chrono::seconds(60));
      if (s.ok()) {
        ++late_ok;
      } else {
        late_failures.push_back(s);
        if (late_failures.size() > 3) break;
      }
    }
  });
  server.Signal(SIGTERM);
  for (std::thread& t : threads) t.join();
  absl::StatusOr<int> code = server.Stop(SIGTERM, absl::Seconds(60));
  stop = true;
  late.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  for (int i = 0; i < kAccepted; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_TRUE(responses[i].outputs().contains("out"));
  }
  // Refused by the server while it drains, before gRPC stops taking calls.
  for (const grpc::Status& s : late_failures) {
    EXPECT_EQ(s.error_code(), StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_NE(s.error_message().find("shutting down"), std::string::npos) << s.error_message();
  }
}

TEST(ServerShutdownTest, FullQueueIsResourceExhaustedAndExpiredWorkIsDropped) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--max-queue=2"}).ok());
  constexpr int kCalls = 8;
  std::vector<grpc::Status> statuses(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      v1::ExecuteResponse response;
      statuses[i] = Call(server.address(), SlowRequest(static_cast<uint64_t>(i), 1024), &response,
                         std::chrono::seconds(60));
    });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0;
  int exhausted = 0;
  for (const grpc::Status& s : statuses) {
    if (s.ok()) ++ok;
    if (s.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      EXPECT_NE(s.error_message().find("queue"), std::string::npos) << s.error_message();
    }
  }
  EXPECT_EQ(ok + exhausted, kCalls);
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);

  // Two long calls occupy the worker; a third whose deadline passes while it waits behind them
  // is dropped by the server without running.
  std::vector<std::thread> busy;
  std::vector<double> busy_seconds(2);
  for (int i = 0; i < 2; ++i) {
    busy.emplace_back([&, i] {
      const auto start = std::chrono::steady_clock::now();
      v1::ExecuteResponse response;
      EXPECT_TRUE(Call(server.address(), SlowRequest(50 + static_cast<uint64_t>(i), 4096),
                       &response, std::chrono::seconds(60))
                      .ok());
      busy_seconds[i] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  ASSERT_TRUE(WaitForMetric(server, "kernelserve_inflight_requests", 2));
  const v1::ExecuteRequest late = SlowRequest(60);
  v1::ExecuteResponse response;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Call(server.address(), late, &response, std::chrono::milliseconds(300)).error_code(),
            StatusCode::DEADLINE_EXCEEDED);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::thread& t : busy) t.join();
  // Only meaningful when the busy calls outlast the deadline, which they do by far.
  ASSERT_GT(std::max(busy_seconds[0], busy_seconds[1]), waited + 0.2);
  EXPECT_TRUE(
      WaitForMetric(server, "kernelserve_requests_total", 1, {"code=\"DEADLINE_EXCEEDED\""}));
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
