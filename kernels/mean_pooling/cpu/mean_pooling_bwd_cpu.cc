#include "kernels/mean_pooling/cpu/mean_pooling_bwd_cpu.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

// Below this many elements of dx one thread beats starting more (a thread start costs tens of
// microseconds, about what writing this many elements takes).
constexpr int64_t kSingleThreadElements = int64_t{1} << 18;
constexpr int kDefaultRows = 64;

KernelConfig CpuConfig(int block_size, int threads) {
  KernelConfig config;
  config.block_size = block_size;
  config.num_warps = threads;
  config.platform = "cpu";
  return config;
}

// Not thread-safe (see PreparedRun).
class MeanPoolingBwdCpuRun : public cpu::CpuRun {
 public:
  MeanPoolingBwdCpuRun(const MeanPoolingProblem& problem, const Tensor* dout,
                       std::vector<int64_t> cu_seqlens, std::vector<uint8_t> mask)
      : cu_seqlens_(std::move(cu_seqlens)), mask_(std::move(mask)) {
    args_.dtype = problem.dtype;
    args_.dout = dout->data();
    AddOutput("dx", problem.dtype, problem.x_shape, &args_.dx);
    args_.total_rows = problem.total_rows;
    args_.hidden = problem.hidden;
    args_.num_sequences = problem.num_sequences;
    args_.seq_len = problem.seq_len;
    if (problem.form == PoolingForm::kVarlen) args_.cu_seqlens = cu_seqlens_.data();
    if (problem.form == PoolingForm::kMasked) args_.mask = mask_.data();
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return cpu::MeanPoolingBwdCpu(args_, config); });
  }

 private:
  const std::vector<int64_t> cu_seqlens_;  // varlen only
  const std::vector<uint8_t> mask_;        // masked only; 1 = counted
  cpu::MeanPoolingBwdArgs args_;           // points into dout, the vectors above and dx
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
    const auto& p = ProblemAs<MeanPoolingProblem>(problem);
    const int64_t elements = p.total_rows * p.hidden;
    return CpuConfig(kDefaultRows,
                     elements < kSingleThreadElements ? 1 : cpu::HardwareThreads(device));
  }

  std::vector<KernelConfig> Candidates(const Problem& /*problem*/,
                                       const DeviceInfo& device) const override {
    std::vector<KernelConfig> configs;
    for (int rows : {kDefaultRows, 512}) {
      for (int threads : std::set<int>{1, 2, cpu::HardwareThreads(device)}) {
        configs.push_back(CpuConfig(rows, threads));
      }
    }
    return configs;
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
    const auto& p = ProblemAs<MeanPoolingProblem>(problem);
    std::vector<int64_t> cu_seqlens;
    std::vector<uint8_t> mask;
    if (auto it = inputs.find("cu_seqlens"); it != inputs.end()) cu_seqlens = it->second.ToInts();
    if (auto it = inputs.find("mask"); it != inputs.end()) {
      for (int64_t value : it->second.ToInts()) mask.push_back(value != 0 ? 1 : 0);
    }
    return std::unique_ptr<PreparedRun>(std::make_unique<MeanPoolingBwdCpuRun>(
        p, &inputs.at("dout"), std::move(cu_seqlens), std::move(mask)));
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCpu() {
  return std::make_unique<MeanPoolingBwdCpuImpl>();
}

}  // namespace kernelserve
