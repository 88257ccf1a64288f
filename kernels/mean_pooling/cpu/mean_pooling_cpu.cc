#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "kernels/mean_pooling/cpu/mean_pooling.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace cpu {
namespace {

// Below this many elements of x (or dx) one thread beats starting more (a thread start costs
// tens of microseconds, about what summing or writing this many elements takes).
constexpr int64_t kSingleThreadElements = int64_t{1} << 18;

}  // namespace

PoolingRowsArgs PoolingRowsOf(const MeanPoolingProblem& p, const MeanPoolingIndex& index) {
  PoolingRowsArgs rows;
  rows.dtype = p.dtype;
  rows.total_rows = p.total_rows;
  rows.hidden = p.hidden;
  rows.num_sequences = p.num_sequences;
  rows.seq_len = p.seq_len;
  if (p.form == PoolingForm::kVarlen) rows.cu_seqlens = index.cu_seqlens.data();
  if (p.form == PoolingForm::kMasked) rows.mask = index.mask.data();
  return rows;
}

KernelConfig PoolingCpuConfig(int block_size, int threads) {
  KernelConfig config;
  config.block_size = block_size;
  SetRequestedThreads(&config, threads);
  config.platform = "cpu";
  return config;
}

int PoolingCpuThreads(const MeanPoolingProblem& p, const DeviceInfo& device) {
  const int64_t elements = p.total_rows * p.hidden;
  return elements < kSingleThreadElements ? 1 : HardwareThreads(device);
}

std::vector<KernelConfig> PoolingCpuCandidates(const std::set<int>& block_sizes,
                                               const DeviceInfo& device) {
  const std::set<int> threads = {1, 2, HardwareThreads(device)};
  std::vector<KernelConfig> configs;
  for (int block_size : block_sizes) {
    for (int t : threads) configs.push_back(PoolingCpuConfig(block_size, t));
  }
  return configs;
}

}  // namespace cpu

namespace {

// chunk_size as a block_size: larger chunks than the kernel's limit split the same way.
int BlockRows(int64_t chunk_size) {
  return static_cast<int>(std::min<int64_t>(chunk_size, cpu::kMaxCpuBlockRows));
}

// Points at x's data in the inputs (which outlive it), copies the mask / offsets as bytes /
// int64 and allocates `out`. Not thread-safe (see PreparedRun).
class MeanPoolingCpuRun : public cpu::CpuRun {
 public:
  MeanPoolingCpuRun(const MeanPoolingProblem& problem, const TensorMap& inputs)
      : block_rows_(BlockRows(problem.chunk_size)),
        index_(inputs),
        args_{cpu::PoolingRowsOf(problem, index_)} {
    args_.x = inputs.at("x").data();
    AddOutput("out", problem.dtype, {problem.num_sequences, problem.hidden}, &args_.out);
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    KernelConfig effective = config;
    if (effective.block_size == 0) effective.block_size = block_rows_;
    return TimedLaunch([&] { return cpu::MeanPoolingCpu(args_, effective); });
  }

 private:
  const int block_rows_;  // block_size 0 means this
  const MeanPoolingIndex index_;
  cpu::MeanPoolingArgs args_;  // points into x, index_ and out
};

// The mean pooling reference as CpuImpl runs it.
struct MeanPoolingCpuTraits {
  using ProblemType = MeanPoolingProblem;
  using Run = MeanPoolingCpuRun;

  static KernelConfig Heuristic(const MeanPoolingProblem& p, const DeviceInfo& device) {
    // The caller's chunk_size is the work split; threads only pay off once the sum is big
    // enough to hide their start-up.
    return cpu::PoolingCpuConfig(BlockRows(p.chunk_size), cpu::PoolingCpuThreads(p, device));
  }
  static std::vector<KernelConfig> Candidates(const MeanPoolingProblem& p,
                                              const DeviceInfo& device) {
    return cpu::PoolingCpuCandidates({BlockRows(p.chunk_size), 32, 128, 512}, device);
  }
  static const ConfigSchema& ConfigFields() { return cpu::MeanPoolingCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return cpu::CheckMeanPoolingCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingCpu() {
  return std::make_unique<cpu::CpuImpl<MeanPoolingCpuTraits>>();
}

}  // namespace kernelserve
