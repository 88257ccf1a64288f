#include "kernels/mean_pooling/cpu/mean_pooling_bwd_cpu.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "core/status_macros.h"
#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "kernels/runtime/cpu/checks.h"

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
class MeanPoolingBwdCpuRun : public PreparedRun {
 public:
  MeanPoolingBwdCpuRun(const MeanPoolingProblem& problem, const Tensor* dout,
                       std::vector<int64_t> cu_seqlens, std::vector<uint8_t> mask)
      : problem_(problem),
        dout_(dout),
        cu_seqlens_(std::move(cu_seqlens)),
        mask_(std::move(mask)),
        dx_(Tensor::Empty(problem.dtype, problem.x_shape)) {}

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    cpu::MeanPoolingBwdArgs args;
    args.dtype = problem_.dtype;
    args.dout = dout_->data();
    args.dx = dx_.data();
    args.total_rows = problem_.total_rows;
    args.hidden = problem_.hidden;
    args.num_sequences = problem_.num_sequences;
    args.seq_len = problem_.seq_len;
    if (problem_.form == MeanPoolingProblem::Form::kVarlen) args.cu_seqlens = cu_seqlens_.data();
    if (problem_.form == MeanPoolingProblem::Form::kMasked) args.mask = mask_.data();
    if (interrupt()) args.interrupt = &interrupt();
    launched_ = false;  // a launch that fails part way leaves dx partly written
    const auto start = std::chrono::steady_clock::now();
    KS_RETURN_IF_ERROR(cpu::MeanPoolingBwdCpu(args, config));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    launched_ = true;
    return elapsed.count();
  }

  absl::StatusOr<TensorMap> Fetch() override { return Outputs(/*take=*/false); }
  // The outputs move out: the run is done with them.
  absl::StatusOr<TensorMap> TakeOutputs(const TensorMap& places) override {
    return places.empty() ? Outputs(/*take=*/true) : FetchInto(places);
  }

 private:
  // The outputs of the last launch, copied or moved out (CopyOrTake).
  absl::StatusOr<TensorMap> Outputs(bool take) {
    if (!launched_) return absl::FailedPreconditionError("Fetch before a successful Launch");
    launched_ = !take;
    TensorMap outputs;
    outputs.emplace("dx", CopyOrTake(dx_, take));
    return outputs;
  }

  const MeanPoolingProblem problem_;
  const Tensor* const dout_;               // not owned
  const std::vector<int64_t> cu_seqlens_;  // varlen only
  const std::vector<uint8_t> mask_;        // masked only; 1 = counted
  Tensor dx_;
  bool launched_ = false;
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
