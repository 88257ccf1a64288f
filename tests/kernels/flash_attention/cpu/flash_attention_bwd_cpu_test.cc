// The CPU platform of flash_attention_bwd: closed forms, masked rows, the same bits for every
// config, low-precision rounding, empty inputs, and its configs (heuristic, candidates, limits).
#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/runtime/cpu/checks.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::CpuDevice;
using ::kernelserve::testing::RunOnCpu;

// The float64 paths against exact closed forms: only the f32 lse and f32 outputs round.
constexpr double kClosedFormRtol = 1e-6;
constexpr double kClosedFormAtol = 1e-7;

KernelConfig Config(int block_q, int block_k, int threads) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.named["threads"] = threads;
  config.platform = "cpu";
  return config;
}

// Sets out and lse of `in` to the CPU forward's on its q, k, v and bias.
void AddResiduals(TensorMap& in, const Attributes& params) {
  TensorMap fwd_in;
  for (const char* name : {"q", "k", "v", "bias"}) {
    if (in.contains(name)) fwd_in[name] = in.at(name);
  }
  Attributes fwd_params = params;
  fwd_params["return_lse"] = true;
  absl::StatusOr<TensorMap> fwd = RunOnCpu(*MakeFlashAttention(), fwd_in, fwd_params, {});
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  in["out"] = fwd->at("out");
  in["lse"] = fwd->at("lse");
}

// q, k, v (and bias when `bias` is not empty) random; out and lse the CPU forward's; dout
// random.
TensorMap BwdInputs(DType dtype, const Shape& q, const Shape& k, const Attributes& params,
                    uint64_t seed, const Shape& bias = {}) {
  TensorMap in = {{"q", RandomTensor(dtype, q, seed)},
                  {"k", RandomTensor(dtype, k, seed + 1)},
                  {"v", RandomTensor(dtype, k, seed + 2)},
                  {"dout", RandomTensor(dtype, q, seed + 3)}};
  if (!bias.empty()) in["bias"] = RandomTensor(DType::kF32, bias, seed + 4);
  AddResiduals(in, params);
  return in;
}

TensorMap RunBwd(const TensorMap& in, const Attributes& params,
                 const KernelConfig& config = KernelConfig{}) {
  absl::StatusOr<TensorMap> got = RunOnCpu(*MakeFlashAttentionBwd(), in, params, config);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : TensorMap{};
}

void ExpectAllZero(const Tensor& t, const std::string& what) {
  for (double x : t.ToDoubles()) ASSERT_EQ(x, 0.0) << what;
}

// With one key, P = 1 for every query that sees it and out = v: dS = 0, so dq = dk = 0 and
// dv = the sum of dout over the queries (and heads of its group) that see the key.
TEST(FlashAttentionBwdCpuTest, SingleKeyClosedForm) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal=" << causal);
    const int64_t b = 2, sq = 5, hq = 4, hkv = 2, d = 8;
    const Attributes params = {{"causal", causal}};
    const TensorMap in = BwdInputs(DType::kF32, {b, sq, hq, d}, {b, 1, hkv, d}, params, 10);
    const TensorMap got = RunBwd(in, params);
    ASSERT_EQ(got.size(), 3u);
    ExpectAllZero(got.at("dq"), "dq");
    ExpectAllZero(got.at("dk"), "dk");
    // Causal: key 0 is visible to the last query only (j <= i + Sk - Sq).
    const std::vector<double> dout = in.at("dout").ToDoubles();
    std::vector<double> want(static_cast<size_t>(b * hkv * d), 0.0);
    for (int64_t n = 0; n < b; ++n) {
      for (int64_t i = causal ? sq - 1 : 0; i < sq; ++i) {
        for (int64_t h = 0; h < hq; ++h) {
          for (int64_t x = 0; x < d; ++x) {
            want[(n * hkv + h / 2) * d + x] += dout[((n * sq + i) * hq + h) * d + x];
          }
        }
      }
    }
    const AllCloseResult dv =
        AllClose(got.at("dv").ToDoubles(), want, kClosedFormRtol, kClosedFormAtol);
    EXPECT_TRUE(dv.ok) << dv.message;
  }
}

// With v the same for every key, out = v and dP_ij = D_i: dS = 0, so dq = dk = dbias = 0, and
// the dv rows of a sequence and kv head sum to the sum of dout (sum_j P_ij = 1).
TEST(FlashAttentionBwdCpuTest, ConstantValuesClosedForm) {
  const int64_t b = 2, sq = 6, sk = 7, h = 2, d = 4;
  const Attributes params = {{"causal", true}, {"logits_soft_cap", 2.0}};
  TensorMap in = BwdInputs(DType::kF32, {b, sq, h, d}, {b, sk, h, d}, params, 20, {1, 1, sq, sk});
  const std::vector<float> row = RandomTensor(DType::kF32, {h, d}, 25).ToFloats();
  std::vector<float> v, out;
  for (int64_t j = 0; j < b * sk; ++j) v.insert(v.end(), row.begin(), row.end());
  for (int64_t i = 0; i < b * sq; ++i) out.insert(out.end(), row.begin(), row.end());
  in["v"] = Tensor::FromFloats(DType::kF32, {b, sk, h, d}, v);
  Attributes bwd_params = params;
  bwd_params["return_dbias"] = true;
  // lse (the forward's) does not depend on v; out is exact, not the forward's.
  in["out"] = Tensor::FromFloats(DType::kF32, {b, sq, h, d}, out);
  const TensorMap got = RunBwd(in, bwd_params);
  ExpectAllZero(got.at("dq"), "dq");
  ExpectAllZero(got.at("dk"), "dk");
  ExpectAllZero(got.at("dbias"), "dbias");
  const std::vector<double> dv = got.at("dv").ToDoubles(), dout = in.at("dout").ToDoubles();
  std::vector<double> sum_dv(static_cast<size_t>(b * h * d), 0.0), sum_dout(sum_dv.size(), 0.0);
  for (int64_t n = 0; n < b; ++n) {
    for (int64_t x = 0; x < h * d; ++x) {
      for (int64_t j = 0; j < sk; ++j) sum_dv[n * h * d + x] += dv[(n * sk + j) * h * d + x];
      for (int64_t i = 0; i < sq; ++i) sum_dout[n * h * d + x] += dout[(n * sq + i) * h * d + x];
    }
  }
  const AllCloseResult close = AllClose(sum_dv, sum_dout, kClosedFormRtol, kClosedFormAtol);
  EXPECT_TRUE(close.ok) << close.message;
}

// A row whose lse is -inf contributes nothing, even where the mask would show it keys: its dq
// row is zero and dk, dv are as if the row were not there.
TEST(FlashAttentionBwdCpuTest, RowsWithMinusInfinityLseContributeNothing) {
  const int64_t sq = 4, sk = 5, d = 8;
  TensorMap in = BwdInputs(DType::kF32, {1, sq, 1, d}, {1, sk, 1, d}, {}, 30);
  TensorMap masked = in;
  std::vector<float> lse = in.at("lse").ToFloats();
  lse[2] = -std::numeric_limits<float>::infinity();
  masked["lse"] = Tensor::FromFloats(DType::kF32, {1, 1, sq}, lse);
  std::vector<float> dout = in.at("dout").ToFloats();
  for (int64_t x = 0; x < d; ++x) dout[2 * d + x] = 0.0f;  // row 2's dout no longer counts
  TensorMap zero_dout = in;
  zero_dout["dout"] = Tensor::FromFloats(DType::kF32, {1, sq, 1, d}, dout);
  const TensorMap got = RunBwd(masked, {});
  const TensorMap want = RunBwd(zero_dout, {});
  for (int64_t x = 0; x < d; ++x) ASSERT_EQ(got.at("dq").GetFloat(2 * d + x), 0.0f);
  for (const char* name : {"dk", "dv"}) {
    const AllCloseResult close = AllClose(got.at(name), want.at(name), 1e-6, 1e-7);
    EXPECT_TRUE(close.ok) << name << ": " << close.message;
  }
}

// Every output element is summed by one work item in a fixed order: the bits do not depend on
// the tiles or the threads.
TEST(FlashAttentionBwdCpuTest, SameBitsForEveryTileAndThreadCount) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Attributes params = {{"causal", true}, {"window_left", int64_t{30}}};
    const TensorMap in =
        BwdInputs(dtype, {2, 45, 4, 32}, {2, 77, 2, 32}, params, 40, {1, 1, 45, 77});
    Attributes bwd_params = params;
    bwd_params["return_dbias"] = true;
    const TensorMap first = RunBwd(in, bwd_params, Config(1, 1, 1));
    ASSERT_EQ(first.size(), 4u);
    for (const KernelConfig& config :
         {Config(16, 32, 2), Config(64, 128, 3), Config(7, 5, 0), KernelConfig{}}) {
      SCOPED_TRACE(config.DebugString());
      const TensorMap got = RunBwd(in, bwd_params, config);
      for (const auto& [name, tensor] : first) {
        EXPECT_EQ(got.at(name).bytes(), tensor.bytes()) << name;
      }
    }
  }
}

// f16 and bf16 results are the f32 path's double sums rounded once: within half an ulp of the
// f32 results on the same values.
TEST(FlashAttentionBwdCpuTest, LowPrecisionRoundsTheSameSums) {
  for (auto [dtype, half_ulp] :
       std::vector<std::pair<DType, double>>{{DType::kF16, 0x1p-11}, {DType::kBF16, 0x1p-8}}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Attributes params = {{"causal", true}};
    const TensorMap low = BwdInputs(dtype, {2, 9, 2, 16}, {2, 11, 1, 16}, params, 50);
    TensorMap f32;
    for (const auto& [name, t] : low) {
      f32[name] = name == "lse" ? t : Tensor::FromFloats(DType::kF32, t.shape(), t.ToFloats());
    }
    const TensorMap got = RunBwd(low, params), want = RunBwd(f32, params);
    for (const char* name : {"dq", "dk", "dv"}) {
      EXPECT_EQ(got.at(name).dtype(), dtype);
      const AllCloseResult close = AllClose(got.at(name), want.at(name), half_ulp, 1e-7);
      EXPECT_TRUE(close.ok) << name << ": " << close.message;
    }
  }
}

// No query or no key: all-zero gradients; empty inputs with huge dims are not walked.
TEST(FlashAttentionBwdCpuTest, EmptyInputsGiveZeros) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 0, 2, 8}, {2, 5, 2, 8}},
                                                       {{2, 3, 2, 8}, {2, 0, 2, 8}},
                                                       {{kHuge, 0, 1, 8}, {kHuge, 0, 1, 8}}};
  for (const auto& [q, k] : shapes) {
    SCOPED_TRACE(ShapeString(q) + " " + ShapeString(k));
    TensorMap in = {{"q", RandomTensor(DType::kF32, q, 60)},
                    {"k", RandomTensor(DType::kF32, k, 61)},
                    {"v", RandomTensor(DType::kF32, k, 62)},
                    {"out", RandomTensor(DType::kF32, q, 63)},
                    {"dout", RandomTensor(DType::kF32, q, 64)},
                    {"lse", Tensor::Zeros(DType::kF32, {q[0], q[2], q[1]})}};
    const TensorMap got = RunBwd(in, {});
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got.at("dk").shape(), k);
    ExpectAllZero(got.at("dq"), "dq");
    ExpectAllZero(got.at("dk"), "dk");
    ExpectAllZero(got.at("dv"), "dv");
  }
}

TEST(FlashAttentionBwdCpuTest, HeuristicIsAPureCandidateAndLimitsHold) {
  const std::unique_ptr<Kernel> kernel = MakeFlashAttentionBwd();
  const PlatformImpl& cpu = *kernel->impl(Platform::kCpu);
  auto specs = [](DType dtype, Shape q, Shape k) {
    return TensorSpecMap{{"q", {dtype, q}},    {"k", {dtype, k}},
                         {"v", {dtype, k}},    {"out", {dtype, q}},
                         {"dout", {dtype, q}}, {"lse", {DType::kF32, {q[0], q[2], q[1]}}}};
  };
  const std::vector<TensorSpecMap> shapes = {
      specs(DType::kF32, {1, 1, 1, 8}, {1, 1, 1, 8}),
      specs(DType::kBF16, {4, 2048, 32, 128}, {4, 2048, 8, 128}),
      specs(DType::kF16, {8, 1, 16, 64}, {8, 4096, 1, 64})};
  for (const TensorSpecMap& inputs : shapes) {
    auto problem = AnalyzeCall(*kernel, inputs, {});
    ASSERT_TRUE(problem.ok()) << problem.status();
    for (int threads : {1, 2, 32}) {
      const KernelConfig heuristic = cpu.Heuristic(**problem, CpuDevice(threads));
      SCOPED_TRACE(heuristic.DebugString());
      EXPECT_EQ(heuristic, cpu.Heuristic(**problem, CpuDevice(threads)));
      EXPECT_TRUE(cpu.IsCandidate(heuristic, **problem, CpuDevice(threads)));
      std::set<std::string> distinct;
      for (const KernelConfig& c : cpu.Candidates(**problem, CpuDevice(threads))) {
        EXPECT_TRUE(cpu.CheckConfig(c, **problem, CpuDevice(threads)).ok());
        distinct.insert(c.ToJson());
      }
      EXPECT_EQ(distinct.size(), cpu.Candidates(**problem, CpuDevice(threads)).size());
    }
  }
  const std::shared_ptr<const Problem> tiny_problem = *AnalyzeCall(*kernel, shapes[0], {});
  const Problem& tiny = *tiny_problem;
  EXPECT_EQ(cpu.Heuristic(tiny, CpuDevice(32)).Named("threads"), 1);
  EXPECT_EQ(cpu.Heuristic(**AnalyzeCall(*kernel, shapes[1], {}), CpuDevice(32)).Named("threads"),
            32);
  KernelConfig bad = Config(-1, 0, 0);
  EXPECT_EQ(cpu.CheckConfig(bad, tiny, CpuDevice(1)).code(), absl::StatusCode::kInvalidArgument);
  bad = Config(0, 0, cpu::kMaxCpuThreads + 1);
  EXPECT_EQ(cpu.CheckConfig(bad, tiny, CpuDevice(1)).code(), absl::StatusCode::kInvalidArgument);
  bad = Config(0, 0, 0);
  bad.num_stages = 2;
  EXPECT_EQ(cpu.CheckConfig(bad, tiny, CpuDevice(1)).code(), absl::StatusCode::kInvalidArgument);
  bad.num_stages = 0;
  bad.platform = "cuda";
  EXPECT_EQ(cpu.CheckConfig(bad, tiny, CpuDevice(1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlashAttentionBwdCpuTest, RunRejectsForeignConfigsAndEarlyFetch) {
  const std::unique_ptr<Kernel> kernel = MakeFlashAttentionBwd();
  const TensorMap in = BwdInputs(DType::kF32, {1, 3, 2, 8}, {1, 4, 2, 8}, {}, 70);
  auto problem = AnalyzeCall(*kernel, SpecsOf(in), {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<std::unique_ptr<PreparedRun>> run =
      kernel->impl(Platform::kCpu)->Prepare(**problem, in, CpuDevice(1));
  ASSERT_TRUE(run.ok());
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig cuda;
  cuda.platform = "cuda";
  EXPECT_EQ((*run)->Launch(cuda).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*run)->Launch(KernelConfig{}).ok());
  EXPECT_TRUE((*run)->Fetch().ok());
}

}  // namespace
}  // namespace kernelserve
