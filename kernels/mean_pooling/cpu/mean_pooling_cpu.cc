#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "kernels/mean_pooling/cpu/mean_pooling.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

using cpu::MeanPoolingArgs;

// Below this many elements of x one thread beats starting more (a thread start costs tens of
// microseconds, about what summing this many elements takes).
constexpr int64_t kSingleThreadElements = int64_t{1} << 18;

// chunk_size as a block_size: larger chunks than the kernel's limit split the same way.
int BlockRows(int64_t chunk_size) {
  return static_cast<int>(std::min<int64_t>(chunk_size, cpu::kMaxCpuBlockRows));
}

KernelConfig CpuConfig(int block_size, int threads) {
  KernelConfig config;
  config.block_size = block_size;
  config.num_warps = threads;
  config.platform = "cpu";
  return config;
}

// Not thread-safe (see PreparedRun).
class MeanPoolingCpuRun : public cpu::CpuRun {
 public:
  MeanPoolingCpuRun(const MeanPoolingProblem& problem, const Tensor* x,
                    std::vector<int64_t> cu_seqlens, std::vector<uint8_t> mask)
      : block_rows_(BlockRows(problem.chunk_size)),
        cu_seqlens_(std::move(cu_seqlens)),
        mask_(std::move(mask)) {
    args_.dtype = problem.dtype;
    args_.x = x->data();
    AddOutput("out", problem.dtype, {problem.num_sequences, problem.hidden}, &args_.out);
    args_.total_rows = problem.total_rows;
    args_.hidden = problem.hidden;
    args_.num_sequences = problem.num_sequences;
    args_.seq_len = problem.seq_len;
    if (problem.form == PoolingForm::kVarlen) args_.cu_seqlens = cu_seqlens_.data();
    if (problem.form == PoolingForm::kMasked) args_.mask = mask_.data();
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    KernelConfig effective = config;
    if (effective.block_size == 0) effective.block_size = block_rows_;
    return TimedLaunch([&] { return cpu::MeanPoolingCpu(args_, effective); });
  }

 private:
  const int block_rows_;                   // block_size 0 means this
  const std::vector<int64_t> cu_seqlens_;  // varlen only
  const std::vector<uint8_t> mask_;        // masked only; 1 = counted
  MeanPoolingArgs args_;                   // points into x, the vectors above and out
};

class MeanPoolingCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }

  absl::Status Supports(const Problem& /*problem*/, const DeviceInfo& /*device*/) const override {
    return absl::OkStatus();  // the reference runs every valid call
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    // The caller's chunk_size is the work split; threads only pay off once the sum is big
    // enough to hide their start-up.
    const auto& p = ProblemAs<MeanPoolingProblem>(problem);
    const int64_t elements = p.total_rows * p.hidden;
    const int threads = elements < kSingleThreadElements ? 1 : cpu::HardwareThreads(device);
    return CpuConfig(BlockRows(p.chunk_size), threads);
  }

  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    const auto& p = ProblemAs<MeanPoolingProblem>(problem);
    const std::set<int> block_sizes = {BlockRows(p.chunk_size), 32, 128, 512};
    const std::set<int> threads = {1, 2, cpu::HardwareThreads(device)};
    std::vector<KernelConfig> configs;
    for (int block_size : block_sizes) {
      for (int t : threads) configs.push_back(CpuConfig(block_size, t));
    }
    return configs;
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& /*problem*/,
                           const DeviceInfo& /*device*/) const override {
    return cpu::CheckMeanPoolingCpuConfig(config);
  }

  // Keeps a pointer to inputs["x"] (which must outlive the run), copies the mask / offsets as
  // bytes / int64 and allocates `out`.
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(
      const Problem& problem, const TensorMap& inputs,
      const DeviceInfo& /*device*/) const override {
    const auto& p = ProblemAs<MeanPoolingProblem>(problem);
    std::vector<int64_t> cu_seqlens;
    std::vector<uint8_t> mask;
    if (auto it = inputs.find("cu_seqlens"); it != inputs.end()) cu_seqlens = it->second.ToInts();
    if (auto it = inputs.find("mask"); it != inputs.end()) {
      for (int64_t value : it->second.ToInts()) mask.push_back(value != 0 ? 1 : 0);
    }
    return std::unique_ptr<PreparedRun>(std::make_unique<MeanPoolingCpuRun>(
        p, &inputs.at("x"), std::move(cu_seqlens), std::move(mask)));
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingCpu() {
  return std::make_unique<MeanPoolingCpuImpl>();
}

}  // namespace kernelserve
