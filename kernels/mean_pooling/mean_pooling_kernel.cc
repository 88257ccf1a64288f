#include "kernels/mean_pooling/mean_pooling_kernel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/seqlens.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

constexpr int64_t kDefaultChunkSize = 32;

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

bool IsIndexType(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

absl::Status CheckExclusive(const TensorSpecMap& inputs) {
  if (inputs.contains("mask") && inputs.contains("cu_seqlens")) {
    return absl::InvalidArgumentError(
        "inputs 'mask' and 'cu_seqlens' both given: expected at most one of them");
  }
  return absl::OkStatus();
}

// Fills the shape fields of `p` for varlen x [T,H] or [1,T,H] with cu_seqlens [N+1].
absl::Status AnalyzeVarlen(const TensorSpec& x, const TensorSpec& cu, MeanPoolingProblem& p) {
  if (cu.shape.size() != 1 || cu.shape[0] < 1) {
    return Invalid("cu_seqlens", absl::StrCat("expected rank 1 [N+1] with N+1 >= 1, got ",
                                              ShapeString(cu.shape)));
  }
  if (!IsIndexType(cu.dtype)) {
    return Invalid("cu_seqlens",
                   absl::StrCat("expected dtype i32 or i64, got ", Sv(DTypeName(cu.dtype))));
  }
  const bool rank2 = x.shape.size() == 2;
  if (!rank2 && !(x.shape.size() == 3 && x.shape[0] == 1)) {
    return Invalid(
        "x", absl::StrCat("with cu_seqlens expected [T,H] or [1,T,H], got ", ShapeString(x.shape)));
  }
  p.form = PoolingForm::kVarlen;
  p.num_sequences = cu.shape[0] - 1;
  p.total_rows = rank2 ? x.shape[0] : x.shape[1];
  p.hidden = rank2 ? x.shape[1] : x.shape[2];
  return absl::OkStatus();
}

// Replaces inputs["cu_seqlens"], when there, by offsets splitting the rows into sequences of
// near equal lengths covering every row.
void SetEvenCuSeqlens(const MeanPoolingProblem& p, TensorMap& inputs) {
  auto cu = inputs.find("cu_seqlens");
  if (cu == inputs.end()) return;
  std::vector<int64_t> offsets(static_cast<size_t>(p.num_sequences + 1));
  for (int64_t n = 0; n <= p.num_sequences; ++n) {
    offsets[static_cast<size_t>(n)] = p.num_sequences == 0 ? 0 : p.total_rows * n / p.num_sequences;
  }
  cu->second = Tensor::FromInts(cu->second.dtype(), cu->second.shape(), offsets);
}

}  // namespace

absl::StatusOr<MeanPoolingProblem> AnalyzeMeanPoolingShapes(const TensorSpecMap& inputs) {
  KS_RETURN_IF_ERROR(CheckExclusive(inputs));
  MeanPoolingProblem p;
  const TensorSpec& x = inputs.at("x");
  p.dtype = x.dtype;
  p.x_shape = x.shape;
  if (auto cu = inputs.find("cu_seqlens"); cu != inputs.end()) {
    KS_RETURN_IF_ERROR(AnalyzeVarlen(x, cu->second, p));
    return p;
  }
  if (x.shape.size() != 3) {
    return Invalid("x", absl::StrCat("expected rank 3 [B,S,H], got ", ShapeString(x.shape)));
  }
  p.num_sequences = x.shape[0];
  p.seq_len = x.shape[1];
  p.total_rows = x.shape[0] * x.shape[1];
  p.hidden = x.shape[2];
  if (auto mask = inputs.find("mask"); mask != inputs.end()) {
    const TensorSpec& m = mask->second;
    if (m.shape != Shape{p.num_sequences, p.seq_len}) {
      return Invalid(
          "mask", absl::StrCat("expected shape [B,S] = ", ShapeString({p.num_sequences, p.seq_len}),
                               ", got ", ShapeString(m.shape)));
    }
    p.form = PoolingForm::kMasked;
  }
  return p;
}

MeanPoolingIndex::MeanPoolingIndex(const TensorMap& inputs) {
  if (auto it = inputs.find("cu_seqlens"); it != inputs.end()) cu_seqlens = it->second.ToInts();
  if (auto it = inputs.find("mask"); it != inputs.end()) {
    mask.reserve(static_cast<size_t>(it->second.numel()));
    for (int64_t value : it->second.ToInts()) mask.push_back(value != 0 ? 1 : 0);
  }
}

const KernelSchema& MeanPoolingSchema() {
  static const KernelSchema* const schema =
      new KernelSchema{.name = "mean_pooling",
                       .version = 1,
                       .doc = "the mean over the rows of each sequence",
                       .inputs = {{"x",
                                   true,
                                   {DType::kF32, DType::kF16, DType::kBF16},
                                   {2, 3},
                                   "[B,S,H], or [T,H] / [1,T,H] with cu_seqlens",
                                   "the rows to average"},
                                  {"mask",
                                   false,
                                   {DType::kBool, DType::kI32, DType::kI64},
                                   {2},
                                   "[B,S]",
                                   "nonzero rows are averaged (x [B,S,H])"},
                                  {"cu_seqlens",
                                   false,
                                   {DType::kI32, DType::kI64},
                                   {1},
                                   "[N+1]",
                                   "sequence n is rows cu[n]..cu[n+1] of x"}},
                       .outputs = {{"out", "dtype of x", "[B,H] (varlen [N,H])",
                                    "the means; zeros for a sequence with no counted row"}},
                       .params = {{"chunk_size", ParamType::kInt, int64_t{kDefaultChunkSize}, 1.0,
                                   std::nullopt, "rows per work item; never changes the result"}},
                       .vjp = "mean_pooling_bwd",
                       .vjp_of = ""};
  return *schema;
}

absl::StatusOr<std::shared_ptr<const Problem>> MeanPoolingKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& attrs) const {
  KS_ASSIGN_OR_RETURN(MeanPoolingProblem p, AnalyzeMeanPoolingShapes(inputs));
  p.chunk_size = ParamOr<int64_t>(MeanPoolingSchema(), attrs, "chunk_size");
  return std::make_shared<const MeanPoolingProblem>(std::move(p));
}

absl::Status MeanPoolingKernel::ValidateData(const Problem& problem,
                                             const TensorMap& inputs) const {
  auto cu = inputs.find("cu_seqlens");
  if (cu == inputs.end()) return absl::OkStatus();
  const auto& p = ProblemAs<MeanPoolingProblem>(problem);
  const absl::Status status = ValidateCuSeqlens(cu->second, p.total_rows);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("input 'cu_seqlens' (x has ", p.total_rows, " rows): ", status.message()));
}

TensorSpecMap MeanPoolingKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<MeanPoolingProblem>(problem);
  return {{"out", TensorSpec{p.dtype, {p.num_sequences, p.hidden}}}};
}

absl::StatusOr<TensorMap> MeanPoolingKernel::SynthesizeInputs(const Problem& problem,
                                                              const TensorSpecMap& specs,
                                                              uint64_t seed) const {
  KS_ASSIGN_OR_RETURN(TensorMap inputs, Kernel::SynthesizeInputs(problem, specs, seed));
  SetEvenCuSeqlens(ProblemAs<MeanPoolingProblem>(problem), inputs);
  return inputs;
}

}  // namespace kernelserve
