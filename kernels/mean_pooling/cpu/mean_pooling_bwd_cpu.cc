#include "kernels/mean_pooling/cpu/mean_pooling_bwd_cpu.h"

#include <memory>
#include <vector>

#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"
#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

constexpr int kDefaultRows = 64;

// Points at dout's data in the inputs (which outlive it), copies the mask / offsets as bytes /
// int64 and allocates dx. x is not read (it may be shape-only). Not thread-safe (see
// PreparedRun).
class MeanPoolingBwdCpuRun : public cpu::CpuRun {
 public:
  MeanPoolingBwdCpuRun(const MeanPoolingProblem& problem, const TensorMap& inputs)
      : index_(inputs), args_{cpu::PoolingRowsOf(problem, index_)} {
    args_.dout = inputs.at("dout").data();
    AddOutput("dx", problem.dtype, problem.x_shape, &args_.dx);
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return cpu::MeanPoolingBwdCpu(args_, config); });
  }

 private:
  const MeanPoolingIndex index_;
  cpu::MeanPoolingBwdArgs args_;  // points into dout, index_ and dx
};

// The mean_pooling_bwd reference as CpuImpl runs it.
struct MeanPoolingBwdCpuTraits {
  using ProblemType = MeanPoolingProblem;
  using Run = MeanPoolingBwdCpuRun;

  static KernelConfig Heuristic(const MeanPoolingProblem& p, const DeviceInfo& device) {
    // Each row is written once from one cached quotient row: threads pay off once the writes
    // outweigh their start-up.
    return cpu::PoolingCpuConfig(kDefaultRows, cpu::PoolingCpuThreads(p, device));
  }
  static std::vector<KernelConfig> Candidates(const MeanPoolingProblem& /*p*/,
                                              const DeviceInfo& device) {
    return cpu::PoolingCpuCandidates({kDefaultRows, 512}, device);
  }
  static const ConfigSchema& ConfigFields() { return cpu::MeanPoolingBwdCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return cpu::CheckMeanPoolingBwdCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCpu() {
  return std::make_unique<cpu::CpuImpl<MeanPoolingBwdCpuTraits>>();
}

}  // namespace kernelserve
