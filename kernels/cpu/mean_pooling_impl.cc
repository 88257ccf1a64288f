#include "kernels/cpu/mean_pooling_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/status_macros.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/mean_pooling.h"
#include "kernels/mean_pooling_kernel.h"

namespace kernelserve::cpu {
namespace {

// Not thread-safe (see PreparedRun).
class MeanPoolingCpuRun : public PreparedRun {
 public:
  MeanPoolingCpuRun(const MeanPoolingProblem& problem, const Tensor* x,
                    std::vector<int64_t> cu_seqlens, std::vector<uint8_t> mask)
      : problem_(problem),
        x_(x),
        cu_seqlens_(std::move(cu_seqlens)),
        mask_(std::move(mask)),
        out_(Tensor::Empty(problem.dtype, {problem.num_sequences, problem.hidden})) {}

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    MeanPoolingArgs args;
    args.dtype = problem_.dtype;
    args.x = x_->data();
    args.out = out_.data();
    args.total_rows = problem_.total_rows;
    args.hidden = problem_.hidden;
    args.num_sequences = problem_.num_sequences;
    args.seq_len = problem_.seq_len;
    if (problem_.form == MeanPoolingProblem::Form::kVarlen) args.cu_seqlens = cu_seqlens_.data();
    if (problem_.form == MeanPoolingProblem::Form::kMasked) args.mask = mask_.data();
    if (interrupt()) args.interrupt = &interrupt();
    KernelConfig effective = config;
    if (effective.block_size == 0) {
      effective.block_size = static_cast<int>(std::min<int64_t>(problem_.chunk_size, 1 << 30));
    }
    launched_ = false;  // a launch that fails part way leaves the outputs partly written
    const auto start = std::chrono::steady_clock::now();
    KS_RETURN_IF_ERROR(MeanPoolingCpu(args, effective));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    launched_ = true;
    return elapsed.count();
  }

  absl::StatusOr<TensorMap> Fetch() override {
    if (!launched_) return absl::FailedPreconditionError("Fetch before a successful Launch");
    return TensorMap{{"out", out_}};
  }

 private:
  const MeanPoolingProblem problem_;
  const Tensor* const x_;                  // not owned
  const std::vector<int64_t> cu_seqlens_;  // varlen only
  const std::vector<uint8_t> mask_;        // masked only; 1 = counted
  Tensor out_;
  bool launched_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreparedRun>> MeanPoolingCpuImpl::Prepare(
    const TensorMap& inputs, const Attributes& attrs, const DeviceInfo& /*device*/) {
  KS_ASSIGN_OR_RETURN(const MeanPoolingProblem problem, AnalyzeMeanPooling(SpecsOf(inputs), attrs));
  std::vector<int64_t> cu_seqlens;
  std::vector<uint8_t> mask;
  if (auto it = inputs.find("cu_seqlens"); it != inputs.end()) cu_seqlens = it->second.ToInts();
  if (auto it = inputs.find("mask"); it != inputs.end()) {
    for (int64_t value : it->second.ToInts()) mask.push_back(value != 0 ? 1 : 0);
  }
  return std::unique_ptr<PreparedRun>(std::make_unique<MeanPoolingCpuRun>(
      problem, &inputs.at("x"), std::move(cu_seqlens), std::move(mask)));
}

absl::Status MeanPoolingCpuImpl::CheckConfig(const KernelConfig& config,
                                             const TensorSpecMap& /*inputs*/,
                                             const DeviceInfo& /*device*/) const {
  return CheckMeanPoolingCpuConfig(config);
}

}  // namespace kernelserve::cpu
