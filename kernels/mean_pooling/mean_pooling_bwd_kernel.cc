#include "kernels/mean_pooling/mean_pooling_bwd_kernel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

// dout against the problem the forward's rules found. REQUIRES: schema checks passed.
absl::Status CheckDout(const TensorSpec& dout, const MeanPoolingProblem& p) {
  if (dout.dtype != p.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input 'dout': dtype ",
                                                   Sv(DTypeName(dout.dtype)), ": expected x's ",
                                                   Sv(DTypeName(p.dtype))));
  }
  const Shape expected = {p.num_sequences, p.hidden};
  if (dout.shape != expected) {
    const char* form = p.form == PoolingForm::kVarlen ? "[N,H]" : "[B,H]";
    return absl::InvalidArgumentError(absl::StrCat("input 'dout': expected the forward's out ",
                                                   form, " = ", ShapeString(expected), ", got ",
                                                   ShapeString(dout.shape)));
  }
  return absl::OkStatus();
}

}  // namespace

const KernelSchema& MeanPoolingBwdSchema() {
  static const KernelSchema* const schema = new KernelSchema{
      .name = "mean_pooling_bwd",
      .version = 1,
      .doc = "mean_pooling's VJP: dx = dout / count over each sequence's counted rows",
      .inputs = {{"dout",
                  true,
                  {DType::kF32, DType::kF16, DType::kBF16},
                  {2},
                  "[B,H] (varlen [N,H])",
                  "the gradient of mean_pooling's out; x's dtype"},
                 {"x",
                  true,
                  {DType::kF32, DType::kF16, DType::kBF16},
                  {2, 3},
                  "[B,S,H], or [T,H] / [1,T,H] with cu_seqlens",
                  "the forward's x: its dtype and shape give dx's",
                  /*shape_only=*/true},
                 {"mask",
                  false,
                  {DType::kBool, DType::kI32, DType::kI64},
                  {2},
                  "[B,S]",
                  "the forward's mask"},
                 {"cu_seqlens",
                  false,
                  {DType::kI32, DType::kI64},
                  {1},
                  "[N+1]",
                  "the forward's cu_seqlens"}},
      .outputs = {{"dx", "dtype of x", "shape of x",
                   "dout / count on counted rows; zeros on the others"}},
      .params = {},
      .vjp = "",
      .vjp_of = "mean_pooling"};
  return *schema;
}

absl::StatusOr<std::shared_ptr<const Problem>> MeanPoolingBwdKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& /*attrs*/) const {
  KS_ASSIGN_OR_RETURN(MeanPoolingProblem p, AnalyzeMeanPoolingShapes(inputs));
  KS_RETURN_IF_ERROR(CheckDout(inputs.at("dout"), p));
  return std::make_shared<const MeanPoolingProblem>(std::move(p));
}

TensorSpecMap MeanPoolingBwdKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<MeanPoolingProblem>(problem);
  return {{"dx", TensorSpec{p.dtype, p.x_shape}}};
}

}  // namespace kernelserve
