// The launch gate: a stream waits at a closed gate until the host opens it, and TimedLaunch's
// kernel time leaves out the host's queuing. Skips where no GPU is visible.
#include "kernels/runtime/cuda/launch_gate.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/kernels/runtime/cuda/cuda_test_util.h"

namespace kernelserve::cuda::testing {
namespace {

// A CudaRun whose launch is whatever the test queues.
class ProbeRun final : public CudaRun {
 public:
  ProbeRun(int ordinal, DeviceThreadResources* resources) : CudaRun(ordinal, resources) {}
  absl::Status Init() { return InitEvents(); }
  absl::StatusOr<double> Launch(const KernelConfig& /*config*/) override {
    return absl::UnimplementedError("the test calls TimedLaunch");
  }
  using CudaRun::TimedLaunch;
};

TEST_F(GpuTest, ClosedGateHoldsTheStreamUntilOpened) {
  auto resources = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(resources.ok()) << resources.status();
  const cudaStream_t stream = (*resources)->stream();
  cudaEvent_t behind = nullptr;
  ASSERT_EQ(cudaEventCreate(&behind), cudaSuccess);
  for (int round = 0; round < 3; ++round) {  // the gate closes again after each opening
    ASSERT_EQ((*resources)->gate().Close(stream), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(behind, stream), cudaSuccess);
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // within the 1 ms timeout
    EXPECT_EQ(cudaEventQuery(behind), cudaErrorNotReady) << "round " << round;
    (*resources)->gate().Open();
    EXPECT_EQ(cudaEventSynchronize(behind), cudaSuccess);
  }
  EXPECT_EQ(cudaEventDestroy(behind), cudaSuccess);
}

TEST_F(GpuTest, GateNeverOpenedLetsTheStreamGoAfterItsTimeout) {
  auto gate = LaunchGate::Create();
  ASSERT_TRUE(gate.ok()) << gate.status();
  auto resources = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(resources.ok()) << resources.status();
  const cudaStream_t stream = (*resources)->stream();
  // A flag that stays 0 while the wait asks for 1, with a 5 ms timeout.
  uint32_t* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(uint32_t), cudaHostAllocMapped),
            cudaSuccess);
  *flag = 0;
  const auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(LaunchWaitForHost(flag, 1, 5'000'000, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  EXPECT_EQ(cudaFreeHost(flag), cudaSuccess);
}

// TimedLaunch of a 1 MiB memset (a few microseconds on the GPU) that the host takes 500 us to
// queue (within the gate's 1 ms timeout).
absl::StatusOr<double> SlowlyQueuedMemset(ProbeRun& run, int ordinal, cudaStream_t stream) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(ordinal, 1 << 20, stream);
  if (!buffer.ok()) return buffer.status();
  return run.TimedLaunch([&](cudaStream_t launch_stream) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    return cudaMemsetAsync(buffer->get(), 0x5a, buffer->size(), launch_stream);
  });
}

// Gates every run (by default none is) for one test.
class GateEveryRun {
 public:
  GateEveryRun() { SetLaunchGateMinBytes(0); }
  ~GateEveryRun() { SetLaunchGateMinBytes(kDefaultLaunchGateMinBytes); }
};

TEST_F(GpuTest, TimedLaunchLeavesTheHostsQueuingOut) {
  const GateEveryRun gate_every_run;
  auto resources = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(resources.ok()) << resources.status();
  ProbeRun run(gpu().ordinal, *resources);
  ASSERT_TRUE(run.Init().ok());
  absl::StatusOr<double> seconds = SlowlyQueuedMemset(run, gpu().ordinal, (*resources)->stream());
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_LT(*seconds, 300e-6);
  EXPECT_GE(run.launch_seconds(), 500e-6);
}

TEST_F(GpuTest, RunsSkipTheGateByDefaultAndBelowTheSetSize) {
  EXPECT_FALSE(LaunchGated(int64_t{1} << 40));  // the default: none
  SetLaunchGateMinBytes(1 << 20);
  EXPECT_TRUE(LaunchGated(1 << 20));
  EXPECT_FALSE(LaunchGated((1 << 20) - 1));
  SetLaunchGateMinBytes(kDefaultLaunchGateMinBytes);
  auto resources = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(resources.ok()) << resources.status();
  ProbeRun run(gpu().ordinal, *resources);  // no inputs: not gated
  ASSERT_TRUE(run.Init().ok());
  absl::StatusOr<double> seconds = SlowlyQueuedMemset(run, gpu().ordinal, (*resources)->stream());
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_GE(*seconds, 400e-6);  // the events count the host's queuing
  EXPECT_EQ(run.launch_seconds(), 0.0);
}

TEST_F(GpuTest, TimedLaunchThatFailsToQueueStillOpensTheGate) {
  const GateEveryRun gate_every_run;
  auto resources = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(resources.ok()) << resources.status();
  ProbeRun run(gpu().ordinal, *resources);
  ASSERT_TRUE(run.Init().ok());
  absl::StatusOr<double> failed =
      run.TimedLaunch([](cudaStream_t /*stream*/) { return cudaErrorInvalidValue; });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
  // The stream goes on at once, not after the gate's 1 ms timeout.
  const auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(cudaStreamSynchronize((*resources)->stream()), cudaSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::microseconds(500));
}

}  // namespace
}  // namespace kernelserve::cuda::testing
