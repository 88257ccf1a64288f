// kernelserve-server with a real redis-server: configs shared between replicas and across
// restarts, and serving on while Redis is down.
#include <chrono>
#include <thread>

#include "core/utils/testing.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/redis_server.h"

namespace kernelserve::testing {
namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

v1::ExecuteResponse MustExecute(const ServerProcess& server, const Tensor& x) {
  auto stub = MakeStub(server.address());
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status status = stub->Execute(&context, MeanPoolingRequest(x), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  if (response.outputs().contains("out")) {
    AllCloseResult close =
        AllClose(WireDoubles(response.outputs().at("out")), MeanPoolingReference(x), kRtol, kAtol);
    EXPECT_TRUE(close.ok) << close.message;
  } else {
    ADD_FAILURE() << "no output";
  }
  return response;
}

std::string Scrape(const ServerProcess& server) {
  absl::StatusOr<std::string> text = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

class ServerRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status started = redis_.Start();
    if (absl::IsNotFound(started)) GTEST_SKIP() << started.message();
    ASSERT_TRUE(started.ok()) << started;
  }
  RedisServerProcess redis_;
};

TEST_F(ServerRedisTest, ReplicasShareTunedConfigsAndRestartsFindThem) {
  const Tensor x = RandomTensor(DType::kF32, {2, 40, 32}, 101);
  const std::vector<std::string> args = {"--cache=" + redis_.url(), "--autotune"};
  ServerProcess a;
  ASSERT_TRUE(a.Start(args).ok());
  const v1::ExecuteResponse tuned = MustExecute(a, x);
  EXPECT_EQ(tuned.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_EQ(MustExecute(a, x).config_source(), v1::CONFIG_SOURCE_MEMORY);

  ServerProcess b;
  ASSERT_TRUE(b.Start(args).ok());
  const v1::ExecuteResponse shared = MustExecute(b, x);
  EXPECT_EQ(shared.config_source(), v1::CONFIG_SOURCE_REDIS);
  EXPECT_EQ(FromProto(shared.config()), FromProto(tuned.config()));
  EXPECT_EQ(shared.cache_key(), tuned.cache_key());

  ASSERT_EQ(*a.Stop(), 0);
  ASSERT_TRUE(a.Start(args).ok());
  const v1::ExecuteResponse restarted = MustExecute(a, x);
  EXPECT_EQ(restarted.config_source(), v1::CONFIG_SOURCE_REDIS);
  EXPECT_EQ(FromProto(restarted.config()), FromProto(tuned.config()));
  EXPECT_EQ(*a.Stop(), 0);
  EXPECT_EQ(*b.Stop(), 0);
}

TEST_F(ServerRedisTest, RedisDownRequestsSucceedErrorsCountedThenWritesResume) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=" + redis_.url(), "--autotune"}).ok());
  ASSERT_GT(server.metrics_port(), 0);
  EXPECT_EQ(MustExecute(server, RandomTensor(DType::kF32, {1, 16, 16}, 110)).config_source(),
            v1::CONFIG_SOURCE_AUTOTUNE);
  const double errors_before = MetricSum(Scrape(server), "kernelserve_store_errors_total");

  ASSERT_TRUE(redis_.Stop().ok());
  for (int i = 0; i < 5; ++i) {
    // A new shape each time: a memory miss that has to go to the store.
    const Tensor x = RandomTensor(DType::kF32, {1, 17 + i, 16}, 111 + static_cast<uint64_t>(i));
    const v1::ExecuteResponse response = MustExecute(server, x);
    EXPECT_NE(response.config_source(), v1::CONFIG_SOURCE_REDIS);
  }
  const double errors_down = MetricSum(Scrape(server), "kernelserve_store_errors_total");
  EXPECT_GT(errors_down, errors_before);

  ASSERT_TRUE(redis_.Restart().ok());
  bool written = false;
  for (int i = 0; i < 50 && !written; ++i) {
    const Tensor x = RandomTensor(DType::kF32, {1, 40 + i, 8}, 130 + static_cast<uint64_t>(i));
    const v1::ExecuteResponse response = MustExecute(server, x);
    absl::StatusOr<std::string> stored =
        redis_.Command({"GET", "kernelserve:v1:cfg:" + response.device_fingerprint() + ":" +
                                   response.cache_key()});
    written = stored.ok() && !stored->empty();
    if (!written) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(written) << "no config reached Redis after it came back";

  const std::string text = Scrape(server);
  std::string promtool;
  EXPECT_EQ(PromtoolCheck(text, &promtool), 0) << promtool;
  for (const char* name :
       {"kernelserve_requests_total", "kernelserve_request_duration_seconds_bucket",
        "kernelserve_kernel_duration_seconds_bucket", "kernelserve_config_selections_total",
        "kernelserve_autotune_runs_total", "kernelserve_autotune_duration_seconds_count",
        "kernelserve_queue_depth", "kernelserve_inflight_requests",
        "kernelserve_store_errors_total", "kernelserve_device_memory_used_bytes",
        "kernelserve_device_memory_total_bytes", "kernelserve_received_bytes_total",
        "kernelserve_sent_bytes_total"}) {
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name;
  }
  EXPECT_GT(MetricSum(text, "kernelserve_requests_total",
                      {"kernel=\"mean_pooling\"", "code=\"OK\"", "platform=\"cpu\""}),
            6.0);
  EXPECT_GT(MetricSum(text, "kernelserve_received_bytes_total"), 0.0);
  EXPECT_GT(MetricSum(text, "kernelserve_store_errors_total", {"store=\"redis\""}), 0.0);
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
