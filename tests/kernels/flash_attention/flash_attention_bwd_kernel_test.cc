#include "kernels/flash_attention/flash_attention_bwd_kernel.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::RunOnCpu;
using ::testing::HasSubstr;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

TensorSpecMap With(TensorSpecMap inputs, const std::string& name, TensorSpec spec) {
  inputs[name] = std::move(spec);
  return inputs;
}

TensorSpecMap Without(TensorSpecMap inputs, const std::string& name) {
  inputs.erase(name);
  return inputs;
}

// q [2,5,4,16], k and v [2,9,2,16] (GQA), out and dout as q, lse [2,4,5].
TensorSpecMap Dense(DType dtype = DType::kF32) {
  return {{"q", Spec(dtype, {2, 5, 4, 16})},    {"k", Spec(dtype, {2, 9, 2, 16})},
          {"v", Spec(dtype, {2, 9, 2, 16})},    {"out", Spec(dtype, {2, 5, 4, 16})},
          {"dout", Spec(dtype, {2, 5, 4, 16})}, {"lse", Spec(DType::kF32, {2, 4, 5})}};
}

// q [20,4,32], k and v [1,30,1,32] (MQA), two sequences; lse [4,20].
TensorSpecMap Varlen() {
  return {{"q", Spec(DType::kF16, {20, 4, 32})},    {"k", Spec(DType::kF16, {1, 30, 1, 32})},
          {"v", Spec(DType::kF16, {1, 30, 1, 32})}, {"out", Spec(DType::kF16, {20, 4, 32})},
          {"dout", Spec(DType::kF16, {20, 4, 32})}, {"lse", Spec(DType::kF32, {4, 20})},
          {"cu_seqlens_q", Spec(DType::kI32, {3})}, {"cu_seqlens_k", Spec(DType::kI64, {3})}};
}

TEST(FlashAttentionBwdKernelTest, IdentityAndSchema) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttentionBwd();
  EXPECT_EQ(kernel->id(), "flash_attention_bwd@v1");
  ASSERT_NE(kernel->impl(Platform::kCpu), nullptr);
  const KernelSchema& schema = kernel->schema();
  EXPECT_EQ(schema.vjp_of, "flash_attention");
  std::set<std::string> names, required;
  for (const InputSchema& input : schema.inputs) {
    names.insert(input.name);
    if (input.required) required.insert(input.name);
    EXPECT_FALSE(input.doc.empty()) << input.name;
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"q", "k", "v", "out", "lse", "dout", "cu_seqlens_q",
                                   "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "bias"}));
  EXPECT_EQ(required, (std::set<std::string>{"q", "k", "v", "out", "lse", "dout"}));
  names.clear();
  for (const ParamSchema& param : schema.params) names.insert(param.name);
  EXPECT_EQ(names, (std::set<std::string>{"causal", "softmax_scale", "window_left", "window_right",
                                          "logits_soft_cap", "return_dbias", "deterministic"}));
  names.clear();
  for (const OutputSchema& output : schema.outputs) names.insert(output.name);
  EXPECT_EQ(names, (std::set<std::string>{"dq", "dk", "dv", "dbias"}));
}

TEST(FlashAttentionBwdKernelTest, AcceptsEveryForm) {
  FlashAttentionBwdKernel kernel;
  std::vector<TensorSpecMap> ok = {Dense(), Dense(DType::kBF16), Varlen()};
  for (Shape bias : {Shape{2, 4, 5, 9}, Shape{1, 4, 5, 9}, Shape{2, 1, 5, 9}, Shape{1, 1, 5, 9}}) {
    ok.push_back(With(Dense(), "bias", Spec(DType::kF32, bias)));
  }
  ok.push_back(With(With(Dense(), "q_segment_ids", Spec(DType::kI32, {2, 5})), "kv_segment_ids",
                    Spec(DType::kI64, {2, 9})));
  for (const TensorSpecMap& inputs : ok) {
    EXPECT_TRUE(AnalyzeCall(kernel, inputs, {}).ok()) << AnalyzeCall(kernel, inputs, {}).status();
  }
  const Attributes all = {{"causal", true},
                          {"softmax_scale", 0.25},
                          {"window_left", int64_t{0}},
                          {"window_right", int64_t{3}},
                          {"logits_soft_cap", 30.0},
                          {"return_dbias", true},
                          {"deterministic", false}};
  const TensorSpecMap biased = With(Dense(), "bias", Spec(DType::kF32, {1, 4, 5, 9}));
  EXPECT_TRUE(AnalyzeFlashAttentionBwd(biased, all).ok());
  absl::StatusOr<FlashAttentionBwdProblem> p = AnalyzeFlashAttentionBwd(biased, all);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->return_dbias);
  EXPECT_FALSE(p->deterministic);
  EXPECT_TRUE(AnalyzeFlashAttentionBwd(biased, {})->deterministic);  // the default
  EXPECT_TRUE(p->fwd.causal);
  EXPECT_FALSE(p->fwd.return_lse);
  EXPECT_EQ(p->fwd.softmax_scale, 0.25);
  EXPECT_EQ(p->k_shape, (Shape{2, 9, 2, 16}));
}

struct BadCase {
  TensorSpecMap inputs;
  Attributes attrs;
  std::string substring;
};

TEST(FlashAttentionBwdKernelTest, AnalysisNamesEveryWrongInput) {
  FlashAttentionBwdKernel kernel;
  const std::vector<BadCase> cases = {
      {With(Dense(), "dout", Spec(DType::kF32, {2, 5, 4, 8})),
       {},
       "input 'dout': expected shape [2,5,4,16] (q's), got [2,5,4,8]"},
      {With(Dense(), "out", Spec(DType::kF32, {2, 6, 4, 16})),
       {},
       "input 'out': expected shape [2,5,4,16] (q's), got [2,6,4,16]"},
      {Without(Dense(), "lse"), {}, "missing input 'lse'"},
      {Without(Dense(), "dout"), {}, "missing input 'dout'"},
      {Without(Dense(), "out"), {}, "missing input 'out'"},
      {With(Dense(), "lse", Spec(DType::kF32, {2, 5, 4})),
       {},
       "input 'lse': expected shape [2,4,5] ([B,Hq,Sq], the forward's lse), got [2,5,4]"},
      {With(Varlen(), "lse", Spec(DType::kF32, {20, 4})),
       {},
       "input 'lse': expected shape [4,20] ([Hq,Tq], the forward's lse), got [20,4]"},
      {With(Varlen(), "lse", Spec(DType::kF32, {1, 4, 20})), {}, "input 'lse': expected shape"},
      {With(Dense(), "lse", Spec(DType::kF16, {2, 4, 5})),
       {},
       "input 'lse': dtype f16: expected f32"},
      {With(Dense(), "out", Spec(DType::kBF16, {2, 5, 4, 16})),
       {},
       "input 'out': dtype bf16: expected f32 (q's)"},
      {With(Dense(), "dout", Spec(DType::kF16, {2, 5, 4, 16})),
       {},
       "input 'dout': dtype f16: expected f32 (q's)"},
      {With(Dense(), "dout", Spec(DType::kI32, {2, 5, 4, 16})), {}, "input 'dout': dtype i32"},
      {Dense(), {{"return_dbias", true}}, "param 'return_dbias' = true without input 'bias'"},
      {Dense(), {{"return_lse", true}}, "unknown param 'return_lse'"},
      // The forward's rules hold for the forward's inputs and params.
      {With(Dense(), "k", Spec(DType::kF16, {2, 9, 2, 16})), {}, "input 'k': dtype f16 differs"},
      {With(Dense(), "bias", Spec(DType::kF32, {2, 3, 5, 9})),
       {},
       "input 'bias': expected [B or 1"},
      {With(Dense(), "q_segment_ids", Spec(DType::kI32, {2, 5})),
       {},
       "input 'q_segment_ids': given"},
      {Without(Varlen(), "cu_seqlens_k"), {}, "input 'cu_seqlens_q': given alone"},
      {Dense(), {{"window_left", int64_t{-2}}}, "param 'window_left' = -2 is out of range"}};
  for (const BadCase& c : cases) {
    const absl::Status status = AnalyzeCall(kernel, c.inputs, c.attrs).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.substring;
    EXPECT_THAT(status.message(), HasSubstr(c.substring));
  }
}

TEST(FlashAttentionBwdKernelTest, OutputSpecs) {
  FlashAttentionBwdKernel kernel;
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, Dense(DType::kBF16), {})),
            (TensorSpecMap{{"dq", Spec(DType::kBF16, {2, 5, 4, 16})},
                           {"dk", Spec(DType::kBF16, {2, 9, 2, 16})},
                           {"dv", Spec(DType::kBF16, {2, 9, 2, 16})}}));
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, Varlen(), {})),
            (TensorSpecMap{{"dq", Spec(DType::kF16, {20, 4, 32})},
                           {"dk", Spec(DType::kF16, {1, 30, 1, 32})},
                           {"dv", Spec(DType::kF16, {1, 30, 1, 32})}}));
  const TensorSpecMap biased = With(Dense(), "bias", Spec(DType::kF32, {1, 4, 5, 9}));
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, biased, {})).size(), 3u);
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, biased, {{"return_dbias", true}})),
            (TensorSpecMap{{"dq", Spec(DType::kF32, {2, 5, 4, 16})},
                           {"dk", Spec(DType::kF32, {2, 9, 2, 16})},
                           {"dv", Spec(DType::kF32, {2, 9, 2, 16})},
                           {"dbias", Spec(DType::kF32, {1, 4, 5, 9})}}));
}

TEST(FlashAttentionBwdKernelTest, ValidateDataChecksBothOffsets) {
  FlashAttentionBwdKernel kernel;
  auto problem = AnalyzeCall(kernel, Varlen(), {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, Varlen(), 3);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_TRUE(kernel.ValidateData(**problem, *inputs).ok());
  for (auto [name, values] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"cu_seqlens_q", {0, 2, 21}},
                                                                 {"cu_seqlens_q", {1, 2, 6}},
                                                                 {"cu_seqlens_k", {0, 3, 2}},
                                                                 {"cu_seqlens_k", {0, 3, 31}}}) {
    TensorMap bad = *inputs;
    bad[name] = Tensor::FromInts(DType::kI32, {3}, values);
    const absl::Status status = kernel.ValidateData(**problem, bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), HasSubstr("input '" + name + "'"));
  }
}

TEST(FlashAttentionBwdKernelTest, ValidateDataRefusesNanAndPlusInfinityInLse) {
  FlashAttentionBwdKernel kernel;
  auto problem = AnalyzeCall(kernel, Dense(), {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, Dense(), 4);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  TensorMap masked = *inputs;
  masked.at("lse").data_as<float>()[3] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(kernel.ValidateData(**problem, masked).ok());  // a row that sees no key
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    TensorMap spoiled = *inputs;
    spoiled.at("lse").data_as<float>()[7] = bad;
    const absl::Status status = kernel.ValidateData(**problem, spoiled);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("input 'lse': element 7 is"));
  }
}

// Shapes-only tuning makes up valid data: offsets that cover q and k, and the forward's out
// and lse on the synthesized q, k and v; the backward runs on them.
TEST(FlashAttentionBwdKernelTest, SynthesizedInputsAreTheForwardsResiduals) {
  FlashAttentionBwdKernel kernel;
  const Attributes params = {{"causal", true}};
  for (const TensorSpecMap& specs :
       {Varlen(), With(Dense(), "bias", Spec(DType::kF32, {1, 1, 5, 9}))}) {
    auto problem = AnalyzeCall(kernel, specs, params);
    ASSERT_TRUE(problem.ok()) << problem.status();
    absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, specs, 5);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    EXPECT_EQ(SpecsOf(*inputs), specs);
    EXPECT_TRUE(kernel.ValidateData(**problem, *inputs).ok());
    TensorMap fwd_in;
    for (const auto& [name, t] : *inputs) {
      if (name != "out" && name != "lse" && name != "dout") fwd_in[name] = t;
    }
    absl::StatusOr<TensorMap> fwd =
        RunOnCpu(*MakeFlashAttention(), fwd_in, {{"causal", true}, {"return_lse", true}}, {});
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    EXPECT_EQ(fwd->at("out").bytes(), inputs->at("out").bytes());
    EXPECT_EQ(fwd->at("lse").bytes(), inputs->at("lse").bytes());
    absl::StatusOr<TensorMap> grads = RunOnCpu(*MakeFlashAttentionBwd(), *inputs, params, {});
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (const auto& [name, t] : *grads) {
      for (double x : t.ToDoubles()) ASSERT_TRUE(std::isfinite(x)) << name;
    }
  }
}

// Past 2^30 multiply-adds the CPU forward is not run: lse is one finite value above every
// logit, so that P <= 1.
TEST(FlashAttentionBwdKernelTest, LargeSynthesizedInputsHaveAFiniteLseBound) {
  FlashAttentionBwdKernel kernel;
  const Shape q = {1, 2048, 8, 64}, k = {1, 2048, 2, 64};
  const TensorSpecMap specs = {
      {"q", Spec(DType::kBF16, q)},    {"k", Spec(DType::kBF16, k)},
      {"v", Spec(DType::kBF16, k)},    {"out", Spec(DType::kBF16, q)},
      {"dout", Spec(DType::kBF16, q)}, {"lse", Spec(DType::kF32, {1, 8, 2048})}};
  auto problem = AnalyzeCall(kernel, specs, {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, specs, 7);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  const std::vector<float> lse = inputs->at("lse").ToFloats();
  // |q.k| <= D = 64 and the scale is 1/8: every logit is at most 8.
  for (float x : lse) ASSERT_EQ(x, lse[0]);
  EXPECT_TRUE(std::isfinite(lse[0]));
  EXPECT_GE(lse[0], 8.0f);
}

}  // namespace
}  // namespace kernelserve
