// kernelserve-server with a real redis-server: configs shared between replicas and across
// restarts, one tune for concurrent misses on two replicas, and serving on while Redis is down.
#include <chrono>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/testing.h"

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

// A flash_attention request on q, k and v.
v1::ExecuteRequest AttentionRequest(const Tensor& q, const Tensor& k, const Tensor& v) {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  (*request.mutable_inputs())["q"] = ToWire(q);
  (*request.mutable_inputs())["k"] = ToWire(k);
  (*request.mutable_inputs())["v"] = ToWire(v);
  request.mutable_flash_attention();
  return request;
}

// Polls RANDOMKEY until it names a tuning lease; "" after `timeout`. While a replica tunes, the
// lease is the only key in the (fresh) database, so RANDOMKEY finds it.
std::string WaitForLeaseKey(const RedisServerProcess& redis, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    absl::StatusOr<std::string> key = redis.Command({"RANDOMKEY"});
    if (key.ok() && key->starts_with("kernelserve:v1:lease:")) return *key;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "";
}

// Two replicas miss the same key at the same moment with tuning allowed: the Redis lease lets
// exactly one tune; the other answers with the heuristic meanwhile, caches nothing, and takes
// the tuned config from Redis once it lands. Attention over 192 keys has 18 CPU candidates, so
// the tune takes about a second: far longer than the other call needs to reach the lease.
TEST_F(ServerRedisTest, ConcurrentMissesOnTwoReplicasTuneOnce) {
  const std::vector<std::string> args = {"--cache=" + redis_.url(), "--autotune"};
  ServerProcess servers[2];
  ASSERT_TRUE(servers[0].Start(args).ok());
  ASSERT_TRUE(servers[1].Start(args).ok());
  const Tensor q = RandomTensor(DType::kF32, {1, 192, 4, 64}, 140);
  const Tensor k = RandomTensor(DType::kF32, {1, 192, 4, 64}, 141);
  const Tensor v = RandomTensor(DType::kF32, {1, 192, 4, 64}, 142);
  const v1::ExecuteRequest request = AttentionRequest(q, k, v);
  std::unique_ptr<v1::KernelService::Stub> stubs[2];
  for (int i = 0; i < 2; ++i) {
    stubs[i] = MakeStub(servers[i].address());
    grpc::ClientContext context;  // connect before the race
    v1::ServerInfo info;
    ASSERT_TRUE(stubs[i]->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  }

  std::latch start(3);
  v1::ExecuteResponse responses[2];
  grpc::Status statuses[2];
  std::vector<std::thread> calls;
  for (int i = 0; i < 2; ++i) {
    calls.emplace_back([&, i] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      start.arrive_and_wait();
      statuses[i] = stubs[i]->Execute(&context, request, &responses[i]);
    });
  }
  start.arrive_and_wait();
  const std::string lease = WaitForLeaseKey(redis_, absl::Seconds(30));
  for (std::thread& t : calls) t.join();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();

  // Exactly one tuned; the other answered with the heuristic, both under the same key.
  const int tuner = responses[0].config_source() == v1::CONFIG_SOURCE_AUTOTUNE ? 0 : 1;
  const int other = 1 - tuner;
  EXPECT_EQ(responses[tuner].config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_EQ(responses[other].config_source(), v1::CONFIG_SOURCE_HEURISTIC);
  const v1::ExecuteResponse& tuned = responses[tuner];
  EXPECT_EQ(responses[other].cache_key(), tuned.cache_key());
  EXPECT_EQ(responses[other].device_fingerprint(), tuned.device_fingerprint());
  double runs[2];
  for (int i = 0; i < 2; ++i) {
    runs[i] = MetricSum(Scrape(servers[i]), "kernelserve_autotune_runs_total");
  }
  EXPECT_EQ(runs[tuner], 1.0);
  EXPECT_EQ(runs[other], 0.0);

  // The lease was held during the tune, under this key, and is released.
  const std::string suffix = tuned.device_fingerprint() + ":" + tuned.cache_key();
  EXPECT_EQ(lease, "kernelserve:v1:lease:" + suffix);
  EXPECT_EQ(*redis_.Command({"EXISTS", "kernelserve:v1:lease:" + suffix}), "0");
  EXPECT_EQ(*redis_.Command({"EXISTS", "kernelserve:v1:cfg:" + suffix}), "1");

  // The other replica cached nothing: its next call takes the tuned config from Redis.
  for (v1::ConfigSource want : {v1::CONFIG_SOURCE_REDIS, v1::CONFIG_SOURCE_MEMORY}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ExecuteResponse again;
    ASSERT_TRUE(stubs[other]->Execute(&context, request, &again).ok());
    EXPECT_EQ(again.config_source(), want);
    EXPECT_EQ(FromProto(again.config()), FromProto(tuned.config()));
  }
  EXPECT_EQ(MetricSum(Scrape(servers[other]), "kernelserve_autotune_runs_total"), 0.0);
  EXPECT_EQ(*servers[0].Stop(), 0);
  EXPECT_EQ(*servers[1].Stop(), 0);
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
