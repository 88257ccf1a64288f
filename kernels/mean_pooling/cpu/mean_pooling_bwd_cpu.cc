#include "kernels/mean_pooling/cpu/mean_pooling_bwd_cpu.h"

#include <memory>
#include <vector>

#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"
#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

constexpr int kDefaultRows = 64;

// Not thread-safe (see PreparedRun).
class MeanPoolingBwdCpuRun : public cpu::CpuRun {
 public:
  MeanPoolingBwdCpuRun(const MeanPoolingProblem& problem, const TensorMap& inputs)
      : index_(inputs) {
    cpu::SetPoolingArgs(problem, index_, args_);
    args_.dout = inputs.at("dout").data();
    AddOutput("dx", problem.dtype, problem.x_shape, &args_.dx);
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return cpu::MeanPoolingBwdCpu(args_, config); });
  }

 private:
  const cpu::PoolingIndexInputs index_;
  cpu::MeanPoolingBwdArgs args_;  // points into dout, index_ and dx
};

class MeanPoolingBwdCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }

  absl::Status Supports(const Problem& /*problem*/, const DeviceInfo& /*device*/) const override {
    return absl::OkStatus();  // the reference runs every valid call
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    // Each row is written once from one cached quotient row: threads pay off once the writes
    // outweigh their start-up.
    return cpu::PoolingCpuConfig(
        kDefaultRows, cpu::PoolingCpuThreads(ProblemAs<MeanPoolingProblem>(problem), device));
  }

  std::vector<KernelConfig> Candidates(const Problem& /*problem*/,
                                       const DeviceInfo& device) const override {
    return cpu::PoolingCpuCandidates({kDefaultRows, 512}, device);
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& /*problem*/,
                           const DeviceInfo& /*device*/) const override {
    return cpu::CheckMeanPoolingBwdCpuConfig(config);
  }

  // Keeps a pointer to inputs["dout"] (which must outlive the run), copies the mask / offsets
  // as bytes / int64 and allocates dx. x is not read (it may be shape-only).
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(
      const Problem& problem, const TensorMap& inputs,
      const DeviceInfo& /*device*/) const override {
    return std::unique_ptr<PreparedRun>(
        std::make_unique<MeanPoolingBwdCpuRun>(ProblemAs<MeanPoolingProblem>(problem), inputs));
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCpu() {
  return std::make_unique<MeanPoolingBwdCpuImpl>();
}

}  // namespace kernelserve
