// Tuning on a GPU that runs several calls at once (server/worker_pool.h lanes with the
// executor's hold_device and step_aside): two calls of one new key tune once, one with the GPU
// held and the other waiting for its result, and neither waits for the other forever.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/executor.h"
#include "gtest/gtest.h"
#include "server/worker_pool.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve::server {
namespace {

using ::kernelserve::testing::FakeCounters;
using ::kernelserve::testing::FakeGpu;
using ::kernelserve::testing::FakeKernel;

TEST(TuningOnLanesTest, TwoCallsOfOneNewKeyTuneOnceWithoutDeadlock) {
  auto counters = std::make_shared<FakeCounters>();
  counters->launch_delay_ms = 20;  // tuning takes ~0.6 s: the second call meets it
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<FakeKernel>(counters, /*also_cuda=*/true)).ok());
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  const DeviceInfo gpu = FakeGpu();
  WorkerPoolOptions pool_options;
  pool_options.gpu_lanes = 2;
  WorkerPool pool({0}, pool_options);
  ExecutorOptions options;
  options.policy.allow_autotune = true;
  options.hold_device = [&pool](int device) -> std::unique_ptr<DeviceHold> {
    return pool.HoldExclusive(device);
  };
  options.step_aside = [&pool](int device) { return pool.StepAside(device); };
  Executor executor(&registry, &chain, {gpu}, options);

  const TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {3}, {1, 2, 3})}};
  ExecuteOptions cuda;
  cuda.platform = "cuda";
  std::atomic<int> ok{0};
  std::atomic<int> tuned{0};
  std::atomic<int> finished{0};
  absl::Notification both;
  // Both calls run on their lanes before either asks for a config: otherwise a slow machine
  // may start the second only after the first has tuned (its hold keeps the lanes from taking
  // items), and the second then finds the config in memory, which is right but not this test.
  absl::Barrier started(2);
  for (int i = 0; i < 2; ++i) {
    WorkItem item;
    item.run = [&](absl::Status, int64_t) {
      started.Block();
      absl::StatusOr<ExecuteResult> result = executor.Execute("fake_scale", in, {}, cuda);
      if (result.ok()) {
        ++ok;
        if (result->source == ConfigSource::kAutotune) ++tuned;
      }
      if (++finished == 2) both.Notify();
    };
    ASSERT_TRUE(pool.Submit(0, std::move(item)).ok());
  }
  if (!both.WaitForNotificationWithTimeout(absl::Seconds(30))) {
    // The two calls wait for each other; the pool cannot be joined, so end the test binary.
    std::fprintf(stderr, "deadlock: a tuning call waits for the device held by its follower\n");
    std::_Exit(1);
  }
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(tuned.load(), 2);  // the follower gets the leader's tuned config
  EXPECT_LE(counters->prepares.load(), 2);
}

}  // namespace
}  // namespace kernelserve::server
