#include "tests/support/example_kernel.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "tests/support/example_kernel_cpu.h"

namespace kernelserve::testing {
namespace {

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

}  // namespace

const KernelSchema& RmsNormSchema() {
  static const KernelSchema* const schema = new KernelSchema{
      .name = "rms_norm",
      .version = 1,
      .doc = "each row of x over its root mean square, times weight",
      .inputs = {{"x",
                  true,
                  {DType::kF32, DType::kF16, DType::kBF16},
                  {1, 2, 3, 4},
                  "[..., H]",
                  "the rows to normalize (the last axis)"},
                 {"weight",
                  false,
                  {DType::kF32, DType::kF16, DType::kBF16},
                  {1},
                  "[H]",
                  "x's dtype; scales each column (default ones)"}},
      .outputs = {{"out", "dtype of x", "shape of x", "x / sqrt(mean(x^2) + eps) * weight"}},
      .params = {{"eps", ParamType::kFloat, 1e-6, 1e-12, 1.0, "added to the mean square"}},
      .vjp = "",
      .vjp_of = ""};
  return *schema;
}

TensorSpecMap RmsNormKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<RmsNormProblem>(problem);
  return {{"out", TensorSpec{p.dtype, p.shape}}};
}

absl::StatusOr<std::shared_ptr<const Problem>> RmsNormKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& attrs) const {
  RmsNormProblem p;
  const TensorSpec& x = inputs.at("x");
  p.dtype = x.dtype;
  p.shape = x.shape;
  p.hidden = x.shape.back();
  // An empty x has no rows to normalize, whatever its other dims (their product could
  // overflow: x [2^40,2^40,0] carries no bytes).
  const bool empty = std::find(x.shape.begin(), x.shape.end(), 0) != x.shape.end();
  p.rows = empty ? 0 : 1;
  for (size_t d = 0; !empty && d + 1 < x.shape.size(); ++d) p.rows *= x.shape[d];
  if (auto weight = inputs.find("weight"); weight != inputs.end()) {
    const TensorSpec& w = weight->second;
    if (w.dtype != x.dtype) {
      return Invalid("weight", absl::StrCat("expected dtype ", Sv(DTypeName(x.dtype)),
                                            " (x's), got ", Sv(DTypeName(w.dtype))));
    }
    if (w.shape != Shape{p.hidden}) {
      return Invalid("weight", absl::StrCat("expected shape [H] = ", ShapeString({p.hidden}),
                                            ", got ", ShapeString(w.shape)));
    }
    p.has_weight = true;
  }
  p.eps = ParamOr<double>(RmsNormSchema(), attrs, "eps");
  return std::make_shared<const RmsNormProblem>(std::move(p));
}

std::unique_ptr<Kernel> MakeExampleKernel() {
  auto kernel = std::make_unique<RmsNormKernel>();
  kernel->AddImpl(MakeRmsNormCpu());
  return kernel;
}

}  // namespace kernelserve::testing
