#include "kernels/flash_attention/flash_attention_bwd_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "core/status_macros.h"
#include "core/utils/seqlens.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cpu/flash_attention_cpu.h"

namespace kernelserve {
namespace {

// Inputs of the backward that the forward does not take.
constexpr const char* kBwdOnlyInputs[] = {"out", "lse", "dout"};
// Past this many multiply-adds SynthesizeInputs does not run the CPU forward for out and lse.
constexpr double kSynthesizeForwardMacs = 1073741824.0;  // 2^30

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

bool IsBwdOnlyInput(const std::string& name) {
  return std::find(std::begin(kBwdOnlyInputs), std::end(kBwdOnlyInputs), name) !=
         std::end(kBwdOnlyInputs);
}

// out or dout: q's dtype and shape.
absl::Status CheckLikeQ(const std::string& name, const TensorSpec& spec,
                        const FlashAttentionProblem& p) {
  if (spec.dtype != p.dtype) {
    return Invalid(name, absl::StrCat("dtype ", Sv(DTypeName(spec.dtype)), ": expected ",
                                      Sv(DTypeName(p.dtype)), " (q's)"));
  }
  if (spec.shape != p.q_shape) {
    return Invalid(name, absl::StrCat("expected shape ", ShapeString(p.q_shape), " (q's), got ",
                                      ShapeString(spec.shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckLse(const TensorSpec& spec, const FlashAttentionProblem& p) {
  if (spec.dtype != DType::kF32) {
    return Invalid("lse", absl::StrCat("dtype ", Sv(DTypeName(spec.dtype)), ": expected f32"));
  }
  const Shape expected = FlashLseShape(p);
  if (spec.shape != expected) {
    return Invalid("lse", absl::StrCat("expected shape ", ShapeString(expected),
                                       p.varlen ? " ([Hq,Tq], the forward's lse)"
                                                : " ([B,Hq,Sq], the forward's lse)",
                                       ", got ", ShapeString(spec.shape)));
  }
  return absl::OkStatus();
}

// The contract's rules beyond the schema. REQUIRES: schema checks passed, params canonical.
absl::StatusOr<FlashAttentionBwdProblem> AnalyzeRules(const TensorSpecMap& inputs,
                                                      const Attributes& attrs) {
  // The forward's own analysis of its inputs and params.
  TensorSpecMap fwd_inputs;
  for (const auto& [name, spec] : inputs) {
    if (!IsBwdOnlyInput(name)) fwd_inputs.emplace(name, spec);
  }
  Attributes fwd_params = attrs;
  fwd_params.erase("return_dbias");
  fwd_params.erase("deterministic");
  FlashAttentionBwdProblem p;
  KS_ASSIGN_OR_RETURN(p.fwd, AnalyzeFlashAttention(fwd_inputs, fwd_params));
  KS_RETURN_IF_ERROR(CheckLikeQ("out", inputs.at("out"), p.fwd));
  KS_RETURN_IF_ERROR(CheckLikeQ("dout", inputs.at("dout"), p.fwd));
  KS_RETURN_IF_ERROR(CheckLse(inputs.at("lse"), p.fwd));
  p.k_shape = inputs.at("k").shape;
  p.return_dbias = ParamOr<bool>(FlashAttentionBwdSchema(), attrs, "return_dbias");
  p.deterministic = ParamOr<bool>(FlashAttentionBwdSchema(), attrs, "deterministic");
  if (p.return_dbias && !p.fwd.has_bias) {
    return absl::InvalidArgumentError(
        "param 'return_dbias' = true without input 'bias': expected a bias to differentiate");
  }
  return p;
}

KernelSchema MakeSchema() {
  const KernelSchema& fwd = FlashAttentionSchema();
  const std::vector<DType> floats = {DType::kF32, DType::kF16, DType::kBF16};
  std::vector<InputSchema> inputs;
  for (const InputSchema& input : fwd.inputs) {
    inputs.push_back(input);
    if (input.name != "v") continue;
    inputs.push_back({"out", true, floats, {3, 4}, "shape of q", "the forward's out, dtype of q"});
    inputs.push_back({"lse",
                      true,
                      {DType::kF32},
                      {2, 3},
                      "[B,Hq,Sq]; varlen [Hq,Tq]",
                      "the forward's lse (return_lse); -inf for rows that see no key"});
    inputs.push_back({"dout", true, floats, {3, 4}, "shape of q", "gradient of out, dtype of q"});
  }
  std::vector<ParamSchema> params;
  for (const ParamSchema& param : fwd.params) {
    if (param.name != "return_lse") params.push_back(param);
  }
  params.push_back({"return_dbias", ParamType::kBool, false, std::nullopt, std::nullopt,
                    "also return dbias (needs bias)"});
  params.push_back({"deterministic", ParamType::kBool, true, std::nullopt, std::nullopt,
                    "the same bits for the same inputs; false lets cuDNN's plans and the own "
                    "Hopper kernel sum in any order (faster)"});
  KernelSchema schema;
  schema.name = "flash_attention_bwd";
  schema.version = 1;
  schema.doc = "gradients of flash_attention: dq, dk, dv (and dbias) from dout, out and lse";
  schema.inputs = std::move(inputs);
  schema.outputs = {{"dq", "dtype of q", "shape of q", "gradient of q"},
                    {"dk", "dtype of k", "shape of k", "gradient of k, summed over query heads"},
                    {"dv", "dtype of k", "shape of k", "gradient of v, summed over query heads"},
                    {"dbias", "f32", "shape of bias",
                     "gradient of bias, summed over its broadcast dims; with return_dbias"}};
  schema.params = std::move(params);
  schema.vjp_of = "flash_attention";
  return schema;
}

// Fills out and lse of `inputs` (q, k, v and the optional inputs valid) with the CPU
// forward's, or, for a large problem, lse with one value above every logit.
absl::Status SynthesizeResiduals(const FlashAttentionProblem& p, TensorMap& inputs) {
  const int64_t n = std::max<int64_t>(p.num_sequences, 1);
  const double macs = 2.0 * static_cast<double>(p.num_heads_q) * static_cast<double>(p.total_q) *
                      static_cast<double>(p.total_k) / static_cast<double>(n) *
                      static_cast<double>(p.head_dim);
  if (macs > kSynthesizeForwardMacs) {
    // Values are in [-1, 1]: |q.k| <= D and |bias| <= 1.
    const double max_logit =
        (p.logits_soft_cap > 0.0 ? p.logits_soft_cap
                                 : std::abs(p.softmax_scale) * static_cast<double>(p.head_dim)) +
        (p.has_bias ? 1.0 : 0.0);
    const float lse = static_cast<float>(max_logit + 1.0);
    Tensor& t = inputs.at("lse");
    for (int64_t i = 0; i < t.numel(); ++i) t.SetFloat(i, lse);
    return absl::OkStatus();
  }
  FlashAttentionProblem fwd = p;
  fwd.return_lse = true;
  const std::unique_ptr<PlatformImpl> cpu = MakeFlashAttentionCpu();
  KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, cpu->Prepare(fwd, inputs, CpuDeviceInfo()));
  KS_RETURN_IF_ERROR(run->Launch(KernelConfig{}).status());
  KS_ASSIGN_OR_RETURN(TensorMap outputs, run->Fetch());
  inputs["out"] = std::move(outputs.at("out"));
  inputs["lse"] = std::move(outputs.at("lse"));
  return absl::OkStatus();
}

}  // namespace

const KernelSchema& FlashAttentionBwdSchema() {
  static const KernelSchema* const schema = new KernelSchema(MakeSchema());
  return *schema;
}

absl::StatusOr<FlashAttentionBwdProblem> AnalyzeFlashAttentionBwd(const TensorSpecMap& inputs,
                                                                  const Attributes& params) {
  KS_RETURN_IF_ERROR(FlashAttentionBwdSchema().CheckInputs(inputs));
  KS_ASSIGN_OR_RETURN(const Attributes attrs, FlashAttentionBwdSchema().CanonicalParams(params));
  return AnalyzeRules(inputs, attrs);
}

absl::StatusOr<std::shared_ptr<const Problem>> FlashAttentionBwdKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& attrs) const {
  KS_ASSIGN_OR_RETURN(FlashAttentionBwdProblem p, AnalyzeRules(inputs, attrs));
  return std::make_shared<const FlashAttentionBwdProblem>(std::move(p));
}

namespace {

// A NaN or +inf in lse would turn every gradient of its row into NaN without a word: refused,
// naming the first such element. -inf is a row that sees no key (its gradients are zeros). An
// lse in GPU memory (a CUDA region) is read in place by the kernel and not checked here.
absl::Status CheckLse(const Tensor& lse) {
  if (lse.device() >= 0 || lse.dtype() != DType::kF32) return absl::OkStatus();
  const float* values = lse.data_as<float>();
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const float value = values[i];
    if (std::isnan(value) || value == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input 'lse': element ", i, " is ", value,
                       "; lse must be finite or -inf (a row that sees no key), as the forward with "
                       "return_lse gives it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FlashAttentionBwdKernel::ValidateData(const Problem& problem,
                                                   const TensorMap& inputs) const {
  const auto& p = ProblemAs<FlashAttentionBwdProblem>(problem).fwd;
  if (auto lse = inputs.find("lse"); lse != inputs.end()) {
    KS_RETURN_IF_ERROR(CheckLse(lse->second));
  }
  if (!p.varlen) return absl::OkStatus();
  for (const auto& [name, total] : {std::pair<std::string, int64_t>{"cu_seqlens_q", p.total_q},
                                    std::pair<std::string, int64_t>{"cu_seqlens_k", p.total_k}}) {
    const absl::Status status = ValidateCuSeqlens(inputs.at(name), total);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' (", total, " rows): ", status.message()));
    }
  }
  return absl::OkStatus();
}

TensorSpecMap FlashAttentionBwdKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<FlashAttentionBwdProblem>(problem);
  TensorSpecMap specs = {{"dq", TensorSpec{p.fwd.dtype, p.fwd.q_shape}},
                         {"dk", TensorSpec{p.fwd.dtype, p.k_shape}},
                         {"dv", TensorSpec{p.fwd.dtype, p.k_shape}}};
  if (p.return_dbias) specs.emplace("dbias", TensorSpec{DType::kF32, FlashBiasShape(p.fwd)});
  return specs;
}

absl::StatusOr<TensorMap> FlashAttentionBwdKernel::SynthesizeInputs(const Problem& problem,
                                                                    const TensorSpecMap& specs,
                                                                    uint64_t seed) const {
  const auto& p = ProblemAs<FlashAttentionBwdProblem>(problem);
  // The forward's synthesis makes q, k, v, the offsets and the segment ids valid (and the
  // other float inputs random).
  KS_ASSIGN_OR_RETURN(TensorMap inputs,
                      FlashAttentionKernel().SynthesizeInputs(p.fwd, specs, seed));
  KS_RETURN_IF_ERROR(SynthesizeResiduals(p.fwd, inputs));
  return inputs;
}

}  // namespace kernelserve
