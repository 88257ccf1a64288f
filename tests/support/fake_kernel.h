// A small kernel for testing the config chain, tuner and executor with exact control over what
// each candidate does: out = 2 * x (f32), configs block_size 1..5.
//   block_size 1..3: correct; each launch reports 1/block_size ms (3 is fastest).
//   block_size 4: fastest of all (0.1 ms) but wrong output (must never win).
//   block_size 5: fails to launch.
// The heuristic is block_size 1. Every analysis, Prepare and Launch is counted.
#ifndef KERNELSERVE_TESTS_SUPPORT_FAKE_KERNEL_H_
#define KERNELSERVE_TESTS_SUPPORT_FAKE_KERNEL_H_

#include <atomic>
#include <memory>
#include <string_view>

#include "core/kernel.h"

namespace kernelserve::testing {

struct FakeCounters {
  std::atomic<int> analyses{0};
  std::atomic<int> prepares{0};
  std::atomic<int> launches{0};
  std::atomic<int> launch_delay_ms{0};  // sleep per launch (to widen races in tests)
};

class FakeKernel : public Kernel {
 public:
  // With `also_cuda`, a "cuda" implementation too that runs the same way on the host (for the
  // executor's GPU paths without a GPU).
  explicit FakeKernel(std::shared_ptr<FakeCounters> counters, bool also_cuda = false);

  const KernelSchema& schema() const override;  // "fake_scale" v1: x f32 [N] -> out
  TensorSpecMap OutputSpecs(const Problem& problem) const override;

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;

 private:
  std::shared_ptr<FakeCounters> counters_;
};

// Adds to `kernel` fake cuda and cudnn implementations (each running like the cpu one, its
// configs naming its platform) and a GPU "auto" over both (Kernel::SetGpuAutoImpl) whose
// heuristic is cudnn's FakeConfig(2, "cudnn").
void AddFakeGpuPlatforms(FakeKernel* kernel, std::shared_ptr<FakeCounters> counters);

// A GPU for executors in tests without one: cuda platform, `ordinal`, fingerprint kind "gpu".
DeviceInfo FakeGpu(int ordinal = 0);

// A config of the fake kernel with the given block size, for `platform`.
KernelConfig FakeConfig(int block_size, std::string_view platform = "cpu");

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_FAKE_KERNEL_H_
