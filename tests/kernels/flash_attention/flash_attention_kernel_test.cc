#include "kernels/flash_attention/flash_attention_kernel.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::RunOnCpu;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

// The attribute values the reference reads.
struct Options {
  bool causal = false;
  double scale = 0;  // 0 = 1/sqrt(D)
  int64_t left = -1;
  int64_t right = -1;
  double cap = 0;
};

// float64 attention over [rows,H,D] views of q, k, v, one sequence range at a time. Bias and
// segment ids are dense-only (cu has B+1 entries of a dense layout then). Returns out and lse
// ([B,Hq,Sq] when dense, [Hq,Tq] when varlen).
std::pair<std::vector<double>, std::vector<double>> Reference(const TensorMap& in,
                                                              const std::vector<int64_t>& cu_q,
                                                              const std::vector<int64_t>& cu_k,
                                                              int64_t hq, int64_t hkv, int64_t d,
                                                              bool varlen, const Options& o) {
  const std::vector<double> q = in.at("q").ToDoubles(), k = in.at("k").ToDoubles(),
                            v = in.at("v").ToDoubles();
  const int64_t tq = static_cast<int64_t>(q.size()) / (hq * d);
  std::vector<double> out(q.size(), 0.0), lse(static_cast<size_t>(tq * hq), -kInf);
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d));
  for (size_t n = 0; n + 1 < cu_q.size(); ++n) {
    const int64_t qb = cu_q[n], ql = cu_q[n + 1] - qb, kb = cu_k[n], kl = cu_k[n + 1] - kb;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hkv);
      for (int64_t i = 0; i < ql; ++i) {
        std::vector<double> s(static_cast<size_t>(kl), -kInf);
        double max = -kInf;
        for (int64_t j = 0; j < kl; ++j) {
          const int64_t diag = i + kl - ql;
          if ((o.causal && j > diag) || (o.left >= 0 && j < diag - o.left) ||
              (o.right >= 0 && j > diag + o.right)) {
            continue;
          }
          if (in.contains("q_segment_ids")) {
            const int64_t id = in.at("q_segment_ids").GetInt(n * ql + i);
            if (id <= 0 || in.at("kv_segment_ids").GetInt(n * kl + j) != id) continue;
          }
          double dot = 0;
          for (int64_t x = 0; x < d; ++x) {
            dot += q[((qb + i) * hq + h) * d + x] * k[((kb + j) * hkv + kh) * d + x];
          }
          s[j] = scale * dot;
          if (o.cap > 0) s[j] = o.cap * std::tanh(s[j] / o.cap);
          if (in.contains("bias")) {
            const Tensor& bias = in.at("bias");
            const int64_t bb = bias.dim(0) == 1 ? 0 : n, bh = bias.dim(1) == 1 ? 0 : h;
            s[j] += bias.GetFloat(((bb * bias.dim(1) + bh) * ql + i) * kl + j);
          }
          max = std::max(max, s[j]);
        }
        if (max == -kInf) continue;
        double sum = 0;
        for (int64_t j = 0; j < kl; ++j) {
          const double p = std::exp(s[j] - max);
          sum += p;
          for (int64_t x = 0; x < d; ++x) {
            out[((qb + i) * hq + h) * d + x] += p * v[((kb + j) * hkv + kh) * d + x];
          }
        }
        for (int64_t x = 0; x < d; ++x) out[((qb + i) * hq + h) * d + x] /= sum;
        lse[varlen ? h * tq + qb + i : (n * hq + h) * ql + i] = max + std::log(sum);
      }
    }
  }
  return {out, lse};
}

std::vector<int64_t> DenseOffsets(int64_t batch, int64_t len) {
  std::vector<int64_t> cu;
  for (int64_t b = 0; b <= batch; ++b) cu.push_back(b * len);
  return cu;
}

TEST(FlashAttentionKernelTest, IdentityAndSchema) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  EXPECT_EQ(kernel->id(), "flash_attention@v1");
  ASSERT_NE(kernel->impl(Platform::kCpu), nullptr);
  const KernelSchema& schema = kernel->schema();
  std::set<std::string> names;
  for (const InputSchema& input : schema.inputs) {
    names.insert(input.name);
    EXPECT_EQ(input.required, input.name == "q" || input.name == "k" || input.name == "v");
    EXPECT_FALSE(input.doc.empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                          "q_segment_ids", "kv_segment_ids", "bias"}));
  names.clear();
  for (const ParamSchema& param : schema.params) names.insert(param.name);
  EXPECT_EQ(names, (std::set<std::string>{"causal", "softmax_scale", "window_left", "window_right",
                                          "logits_soft_cap", "return_lse"}));
  ASSERT_EQ(schema.outputs.size(), 2u);
}

// q [2,5,6,16], k and v [2,9,3,16].
TensorSpecMap Qkv(DType dtype = DType::kF32) {
  return {{"q", Spec(dtype, {2, 5, 6, 16})},
          {"k", Spec(dtype, {2, 9, 3, 16})},
          {"v", Spec(dtype, {2, 9, 3, 16})}};
}

TensorSpecMap With(TensorSpecMap inputs, const std::string& name, TensorSpec spec) {
  inputs[name] = std::move(spec);
  return inputs;
}

TensorSpecMap Varlen(int64_t entries = 3) {
  return {{"q", Spec(DType::kF16, {20, 4, 32})},
          {"k", Spec(DType::kF16, {1, 30, 1, 32})},
          {"v", Spec(DType::kF16, {1, 30, 1, 32})},
          {"cu_seqlens_q", Spec(DType::kI32, {entries})},
          {"cu_seqlens_k", Spec(DType::kI64, {entries})}};
}

TEST(FlashAttentionKernelTest, AcceptsEveryForm) {
  FlashAttentionKernel kernel;
  std::vector<TensorSpecMap> ok = {Qkv(), Qkv(DType::kBF16), Varlen()};
  for (Shape bias : {Shape{2, 6, 5, 9}, Shape{1, 6, 5, 9}, Shape{2, 1, 5, 9}, Shape{1, 1, 5, 9}}) {
    ok.push_back(With(Qkv(), "bias", Spec(DType::kF32, bias)));
  }
  ok.push_back(With(With(Qkv(), "q_segment_ids", Spec(DType::kI32, {2, 5})), "kv_segment_ids",
                    Spec(DType::kI64, {2, 9})));
  for (const TensorSpecMap& inputs : ok) {
    const absl::Status status = AnalyzeCall(kernel, inputs, {}).status();
    EXPECT_TRUE(status.ok()) << status;
  }
  const Attributes all = {{"causal", true},
                          {"softmax_scale", 0.25},
                          {"window_left", int64_t{0}},
                          {"window_right", int64_t{3}},
                          {"logits_soft_cap", 30.0},
                          {"return_lse", true}};
  EXPECT_TRUE(AnalyzeCall(kernel, Qkv(), all).ok());
  EXPECT_TRUE(AnalyzeCall(kernel, Qkv(), {{"softmax_scale", int64_t{1}}}).ok());
  EXPECT_TRUE(AnalyzeCall(kernel, Qkv(), {{"window_left", int64_t{-1}}}).ok());  // unlimited
}

struct BadCase {
  TensorSpecMap inputs;
  Attributes attrs;
  std::string substring;
};

TEST(FlashAttentionKernelTest, AnalysisNamesEveryWrongInput) {
  FlashAttentionKernel kernel;
  TensorSpecMap no_v = Qkv();
  no_v.erase("v");
  TensorSpecMap cu_q_only = Varlen();
  cu_q_only.erase("cu_seqlens_k");
  const std::vector<BadCase> cases = {
      {With(Qkv(), "mask", Spec(DType::kBool, {2, 5})), {}, "unknown input 'mask'"},
      {no_v, {}, "missing input 'v'"},
      {With(Qkv(), "q", Spec(DType::kI32, {2, 5, 6, 16})),
       {},
       "input 'q': dtype i32: expected f32|f16|bf16"},
      {With(Qkv(), "k", Spec(DType::kF16, {2, 9, 3, 16})), {}, "input 'k': dtype f16 differs"},
      {With(Qkv(), "v", Spec(DType::kBF16, {2, 9, 3, 16})), {}, "input 'v': dtype bf16"},
      {With(Qkv(), "q", Spec(DType::kF32, {10, 6, 16})), {}, "input 'q': expected rank 4"},
      {With(With(Qkv(), "k", Spec(DType::kF32, {2, 9, 48})), "v", Spec(DType::kF32, {2, 9, 48})),
       {},
       "input 'k': expected rank 4"},
      {With(With(Qkv(), "k", Spec(DType::kF32, {2, 9, 3, 8})), "v",
            Spec(DType::kF32, {2, 9, 3, 8})),
       {},
       "input 'k': head dim 8 differs from q's 16"},
      {With(With(Qkv(), "k", Spec(DType::kF32, {2, 9, 4, 16})), "v",
            Spec(DType::kF32, {2, 9, 4, 16})),
       {},
       "q has 6 heads, k has 4: Hq must be a multiple of Hkv"},
      {With(Qkv(), "v", Spec(DType::kF32, {2, 8, 3, 16})),
       {},
       "input 'v': expected the shape of k"},
      {With(With(Qkv(), "k", Spec(DType::kF32, {3, 9, 3, 16})), "v",
            Spec(DType::kF32, {3, 9, 3, 16})),
       {},
       "input 'k': batch 3"},
      {With(With(With(Qkv(), "q", Spec(DType::kF32, {2, 5, 6, 257})), "k",
                 Spec(DType::kF32, {2, 9, 3, 257})),
            "v", Spec(DType::kF32, {2, 9, 3, 257})),
       {},
       "input 'q': head dim D = 257"},
      {With(With(With(Qkv(), "q", Spec(DType::kF32, {2, 5, 6, 0})), "k",
                 Spec(DType::kF32, {2, 9, 3, 0})),
            "v", Spec(DType::kF32, {2, 9, 3, 0})),
       {},
       "input 'q': head dim D = 0"},
      {With(Qkv(), "bias", Spec(DType::kF32, {2, 6, 9, 5})), {}, "input 'bias': expected [B or 1"},
      {With(Qkv(), "bias", Spec(DType::kF32, {2, 3, 5, 9})), {}, "input 'bias': expected [B or 1"},
      {With(Qkv(), "bias", Spec(DType::kF32, {6, 5, 9})), {}, "input 'bias': [6,5,9] has rank 3"},
      {With(Qkv(), "bias", Spec(DType::kF16, {2, 6, 5, 9})), {}, "input 'bias': dtype f16"},
      {With(Varlen(), "bias", Spec(DType::kF32, {1, 4, 20, 30})),
       {},
       "input 'bias': not supported"},
      {With(Qkv(), "q_segment_ids", Spec(DType::kI32, {2, 5})), {}, "input 'q_segment_ids': given"},
      {With(With(Qkv(), "q_segment_ids", Spec(DType::kI32, {2, 9})), "kv_segment_ids",
            Spec(DType::kI32, {2, 9})),
       {},
       "input 'q_segment_ids': expected [B,Sq]"},
      {With(With(Qkv(), "q_segment_ids", Spec(DType::kI32, {2, 5})), "kv_segment_ids",
            Spec(DType::kI32, {2, 5})),
       {},
       "input 'kv_segment_ids': expected [B,Sk]"},
      {With(With(Qkv(), "q_segment_ids", Spec(DType::kF32, {2, 5})), "kv_segment_ids",
            Spec(DType::kI32, {2, 9})),
       {},
       "input 'q_segment_ids': dtype f32"},
      {cu_q_only, {}, "input 'cu_seqlens_q': given alone"},
      {With(Varlen(), "cu_seqlens_k", Spec(DType::kI32, {4})), {}, "input 'cu_seqlens_k': has 4"},
      {With(Varlen(), "cu_seqlens_q", Spec(DType::kI32, {3, 1})), {}, "input 'cu_seqlens_q'"},
      {With(Varlen(), "cu_seqlens_q", Spec(DType::kF32, {3})), {}, "input 'cu_seqlens_q'"},
      {With(Varlen(), "q", Spec(DType::kF16, {2, 10, 4, 32})), {}, "input 'q': with cu_seqlens"},
      {Qkv(), {{"window_left", int64_t{-2}}}, "param 'window_left' = -2 is out of range"},
      {Qkv(), {{"window_right", int64_t{-3}}}, "'window_right'"},
      {Qkv(), {{"window_left", 2.0}}, "'window_left'"},
      {Qkv(), {{"logits_soft_cap", -1.0}}, "'logits_soft_cap'"},
      {Qkv(), {{"softmax_scale", std::nan("")}}, "'softmax_scale'"},
      {Qkv(), {{"causal", int64_t{1}}}, "'causal'"},
      {Qkv(), {{"return_lse", std::string("yes")}}, "'return_lse'"},
      {Qkv(), {{"dropout", 0.1}}, "unknown param 'dropout'"}};
  for (const BadCase& c : cases) {
    const absl::Status status = AnalyzeCall(kernel, c.inputs, c.attrs).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.substring;
    EXPECT_THAT(status.message(), HasSubstr(c.substring));
  }
}

TEST(FlashAttentionKernelTest, ValidateDataChecksBothOffsets) {
  FlashAttentionKernel kernel;
  TensorMap inputs = {{"q", RandomTensor(DType::kF32, {6, 2, 8}, 1)},
                      {"k", RandomTensor(DType::kF32, {7, 1, 8}, 2)},
                      {"v", RandomTensor(DType::kF32, {7, 1, 8}, 3)},
                      {"cu_seqlens_q", Tensor::FromInts(DType::kI32, {3}, {0, 2, 6})},
                      {"cu_seqlens_k", Tensor::FromInts(DType::kI64, {3}, {0, 7, 7})}};
  auto problem = AnalyzeCall(kernel, SpecsOf(inputs), {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  EXPECT_TRUE(kernel.ValidateData(**problem, inputs).ok());
  for (auto [name, values] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"cu_seqlens_q", {0, 2, 7}},
                                                                 {"cu_seqlens_q", {1, 2, 6}},
                                                                 {"cu_seqlens_k", {0, 3, 2}},
                                                                 {"cu_seqlens_k", {0, 3, 8}}}) {
    TensorMap bad = inputs;
    bad[name] = Tensor::FromInts(DType::kI32, {3}, values);
    const absl::Status status = kernel.ValidateData(**problem, bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), HasSubstr("input '" + name + "'"));
  }
}

TEST(FlashAttentionKernelTest, OutputSpecs) {
  FlashAttentionKernel kernel;
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, Qkv(DType::kBF16), {})),
            (TensorSpecMap{{"out", Spec(DType::kBF16, {2, 5, 6, 16})}}));
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, Qkv(), {{"return_lse", true}})),
            (TensorSpecMap{{"out", Spec(DType::kF32, {2, 5, 6, 16})},
                           {"lse", Spec(DType::kF32, {2, 6, 5})}}));
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, Varlen(), {{"return_lse", true}})),
            (TensorSpecMap{{"out", Spec(DType::kF16, {20, 4, 32})},
                           {"lse", Spec(DType::kF32, {4, 20})}}));
}

double Tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 5e-3 : 1e-2;
}

void ExpectOutputs(const TensorMap& got, const std::vector<double>& out,
                   const std::vector<double>& lse, DType dtype) {
  ASSERT_TRUE(got.contains("out"));
  ASSERT_TRUE(got.contains("lse"));
  const std::vector<double> values = got.at("out").ToDoubles();
  for (double x : values) ASSERT_FALSE(std::isnan(x));
  EXPECT_LT(RelativeError(values, out), Tolerance(dtype));
  const AllCloseResult close = AllClose(got.at("lse").ToDoubles(), lse, 1e-5, 1e-4);
  EXPECT_TRUE(close.ok) << close.message;
}

TEST(FlashAttentionKernelTest, CpuRunAppliesEveryAttributeAndOptionalInput) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  uint64_t seed = 50;
  const int64_t b = 2, sq = 13, sk = 21, hq = 4, hkv = 2, d = 32;
  // Each dtype broadcasts the bias differently.
  std::map<DType, Shape> bias_shapes = {{DType::kF32, {1, hq, sq, sk}},
                                        {DType::kF16, {b, 1, sq, sk}},
                                        {DType::kBF16, {1, 1, sq, sk}}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TensorMap in = {{"q", RandomTensor(dtype, {b, sq, hq, d}, seed++)},
                    {"k", RandomTensor(dtype, {b, sk, hkv, d}, seed++)},
                    {"v", RandomTensor(dtype, {b, sk, hkv, d}, seed++)},
                    {"bias", RandomTensor(DType::kF32, bias_shapes[dtype], seed++, -2.0f, 2.0f)}};
    std::vector<int64_t> q_ids = RandomTensor(DType::kI32, {b, sq}, seed++, -1.0f, 3.0f).ToInts();
    std::vector<int64_t> kv_ids = RandomTensor(DType::kI32, {b, sk}, seed++, 1.0f, 3.0f).ToInts();
    in["q_segment_ids"] = Tensor::FromInts(DType::kI64, {b, sq}, q_ids);
    in["kv_segment_ids"] = Tensor::FromInts(DType::kI32, {b, sk}, kv_ids);
    const Options o = {true, 0.2, 6, 1, 2.5};
    const Attributes attrs = {{"causal", o.causal},       {"softmax_scale", o.scale},
                              {"window_left", o.left},    {"window_right", o.right},
                              {"logits_soft_cap", o.cap}, {"return_lse", true}};
    absl::StatusOr<TensorMap> got = RunOnCpu(*kernel, in, attrs, KernelConfig{});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->at("out").spec(), in.at("q").spec());
    EXPECT_EQ(got->at("lse").spec(), Spec(DType::kF32, {b, hq, sq}));
    auto [out, lse] = Reference(in, DenseOffsets(b, sq), DenseOffsets(b, sk), hq, hkv, d, false, o);
    ExpectOutputs(*got, out, lse, dtype);
  }
}

TEST(FlashAttentionKernelTest, CpuRunVarlenWithEmptySequence) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const std::vector<int64_t> cu_q = {0, 4, 4, 19, 30}, cu_k = {0, 6, 9, 9, 40};
  for (DType cu_dtype : {DType::kI32, DType::kI64}) {
    for (bool leading_one : {false, true}) {
      const int64_t hq = 3, hkv = 1, d = 80;
      const Shape q_shape = leading_one ? Shape{1, 30, hq, d} : Shape{30, hq, d};
      const Shape k_shape = leading_one ? Shape{1, 40, hkv, d} : Shape{40, hkv, d};
      const TensorMap in = {{"q", RandomTensor(DType::kBF16, q_shape, 60)},
                            {"k", RandomTensor(DType::kBF16, k_shape, 61)},
                            {"v", RandomTensor(DType::kBF16, k_shape, 62)},
                            {"cu_seqlens_q", Tensor::FromInts(cu_dtype, {5}, cu_q)},
                            {"cu_seqlens_k", Tensor::FromInts(cu_dtype, {5}, cu_k)}};
      const Attributes attrs = {{"causal", true}, {"return_lse", true}};
      absl::StatusOr<TensorMap> got = RunOnCpu(*kernel, in, attrs, KernelConfig{});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->at("out").shape(), q_shape);
      EXPECT_EQ(got->at("lse").shape(), (Shape{hq, 30}));
      Options o;
      o.causal = true;
      auto [out, lse] = Reference(in, cu_q, cu_k, hq, hkv, d, true, o);
      ExpectOutputs(*got, out, lse, DType::kBF16);
      // Sequence 2 (rows 4..18) has no keys: zeros and lse -inf.
      for (int64_t i = 4 * hq * d; i < 19 * hq * d; ++i) {
        ASSERT_EQ(got->at("out").GetFloat(i), 0.0f);
      }
      EXPECT_EQ(got->at("lse").GetFloat(10), -std::numeric_limits<float>::infinity());
    }
  }
}

TEST(FlashAttentionKernelTest, NoLseUnlessAsked) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const TensorMap in = {{"q", RandomTensor(DType::kF32, {1, 3, 2, 8}, 70)},
                        {"k", RandomTensor(DType::kF32, {1, 4, 2, 8}, 71)},
                        {"v", RandomTensor(DType::kF32, {1, 4, 2, 8}, 72)}};
  absl::StatusOr<TensorMap> got = RunOnCpu(*kernel, in, {}, KernelConfig{});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  EXPECT_TRUE(got->contains("out"));
}

// Shapes-only tuning makes up valid data: offsets that cover q and k.
TEST(FlashAttentionKernelTest, SynthesizedInputsAreValid) {
  FlashAttentionKernel kernel;
  auto problem = AnalyzeCall(kernel, Varlen(), {});
  ASSERT_TRUE(problem.ok());
  absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, Varlen(), 5);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(SpecsOf(*inputs), Varlen());
  EXPECT_TRUE(kernel.ValidateData(**problem, *inputs).ok());
}

}  // namespace
}  // namespace kernelserve
