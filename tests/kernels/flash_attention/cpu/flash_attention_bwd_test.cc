// flash_attention_bwd on the CPU against central finite differences of a float64 forward,
// for every option of the forward.
#include "kernels/flash_attention/flash_attention_bwd.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::RunOnCpu;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Central differences in double: truncation error ~ eps^2, rounding ~ 1e-16 / eps.
constexpr double kFdEps = 1e-4;
// The kernel's gradients against them: its out and lse are f32 (about 1e-7 relative) and its
// results are rounded to f32.
constexpr double kGradRtol = 1e-5;
constexpr double kGradAtol = 1e-6;
// The float64 forward against the f32 CPU forward.
constexpr double kForwardRtol = 1e-5;
constexpr double kForwardAtol = 1e-6;

// One attention call: dense [B,S,H,D], or varlen [T,H,D] when cu_q is set.
struct Case {
  int64_t batch = 2;
  int64_t sq = 5;
  int64_t sk = 6;
  int64_t hq = 2;
  int64_t hkv = 2;
  int64_t d = 8;
  std::vector<int64_t> cu_q;  // varlen when not empty
  std::vector<int64_t> cu_k;
  int64_t total_q = 0;  // varlen rows of q and k
  int64_t total_k = 0;
  Shape bias;                   // [B or 1, Hq or 1, Sq, Sk]; empty = none (with dbias when set)
  std::vector<int64_t> q_seg;   // [B,Sq]; empty = none
  std::vector<int64_t> kv_seg;  // [B,Sk]
  bool causal = false;
  double scale = 0.0;  // 0 = 1/sqrt(D)
  int64_t left = -1;
  int64_t right = -1;
  double cap = 0.0;
  uint64_t seed = 1;

  bool varlen() const { return !cu_q.empty(); }
  int64_t sequences() const { return varlen() ? static_cast<int64_t>(cu_q.size()) - 1 : batch; }
  int64_t rows_q() const { return varlen() ? total_q : batch * sq; }
  int64_t begin_q(int64_t n) const { return varlen() ? cu_q[n] : n * sq; }
  int64_t len_q(int64_t n) const { return varlen() ? cu_q[n + 1] - cu_q[n] : sq; }
  int64_t begin_k(int64_t n) const { return varlen() ? cu_k[n] : n * sk; }
  int64_t len_k(int64_t n) const { return varlen() ? cu_k[n + 1] - cu_k[n] : sk; }
};

// The float inputs as doubles: q, k, v and bias (what the differences perturb).
using Values = std::map<std::string, std::vector<double>>;

struct Forward {
  std::vector<double> out;  // shaped as q
  std::vector<double> lse;  // [B,Hq,Sq] dense, [Hq,Tq] varlen
};

bool Visible(const Case& c, int64_t n, int64_t i, int64_t j) {
  const int64_t diagonal = i + c.len_k(n) - c.len_q(n);
  if (c.causal && j > diagonal) return false;
  if (c.left >= 0 && j < diagonal - c.left) return false;
  if (c.right >= 0 && j > diagonal + c.right) return false;
  if (c.q_seg.empty()) return true;
  const int64_t id = c.q_seg[n * c.sq + i];
  return id > 0 && c.kv_seg[n * c.sk + j] == id;
}

// The logits of query row i of sequence n and head h (-inf where hidden).
std::vector<double> Logits(const Case& c, const Values& x, int64_t n, int64_t h, int64_t i) {
  const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  const int64_t kh = h / (c.hq / c.hkv);
  std::vector<double> s(static_cast<size_t>(c.len_k(n)), -kInf);
  for (int64_t j = 0; j < c.len_k(n); ++j) {
    if (!Visible(c, n, i, j)) continue;
    double dot = 0.0;
    for (int64_t e = 0; e < c.d; ++e) {
      dot += x.at("q")[((c.begin_q(n) + i) * c.hq + h) * c.d + e] *
             x.at("k")[((c.begin_k(n) + j) * c.hkv + kh) * c.d + e];
    }
    s[j] = scale * dot;
    if (c.cap > 0.0) s[j] = c.cap * std::tanh(s[j] / c.cap);
    if (!c.bias.empty()) {
      const int64_t bb = c.bias[0] == 1 ? 0 : n, bh = c.bias[1] == 1 ? 0 : h;
      s[j] += x.at("bias")[((bb * c.bias[1] + bh) * c.sq + i) * c.sk + j];
    }
  }
  return s;
}

// Attention in double, one query row at a time, straight from the definitions.
Forward Attention(const Case& c, const Values& x) {
  Forward f{std::vector<double>(x.at("q").size(), 0.0),
            std::vector<double>(static_cast<size_t>(c.rows_q() * c.hq), -kInf)};
  for (int64_t n = 0; n < c.sequences(); ++n) {
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t kh = h / (c.hq / c.hkv);
      for (int64_t i = 0; i < c.len_q(n); ++i) {
        const std::vector<double> s = Logits(c, x, n, h, i);
        double max = -kInf;
        for (double logit : s) max = std::max(max, logit);
        if (max == -kInf) continue;
        double sum = 0.0;
        double* o = &f.out[((c.begin_q(n) + i) * c.hq + h) * c.d];
        for (int64_t j = 0; j < c.len_k(n); ++j) {
          const double p = std::exp(s[j] - max);
          sum += p;
          for (int64_t e = 0; e < c.d; ++e) {
            o[e] += p * x.at("v")[((c.begin_k(n) + j) * c.hkv + kh) * c.d + e];
          }
        }
        for (int64_t e = 0; e < c.d; ++e) o[e] /= sum;
        const int64_t row = c.begin_q(n) + i;
        f.lse[c.varlen() ? h * c.total_q + row : (n * c.hq + h) * c.sq + i] = max + std::log(sum);
      }
    }
  }
  return f;
}

// d(sum(dout * out)) / d(x[name]) by central differences.
std::vector<double> FiniteDifferences(const Case& c, Values x, const std::string& name,
                                      const std::vector<double>& dout) {
  auto loss = [&] {
    const std::vector<double> out = Attention(c, x).out;
    double sum = 0.0;
    for (size_t e = 0; e < out.size(); ++e) sum += dout[e] * out[e];
    return sum;
  };
  std::vector<double>& values = x.at(name);
  std::vector<double> grad(values.size());
  for (size_t e = 0; e < values.size(); ++e) {
    const double saved = values[e];
    values[e] = saved + kFdEps;
    const double plus = loss();
    values[e] = saved - kFdEps;
    const double minus = loss();
    values[e] = saved;
    grad[e] = (plus - minus) / (2.0 * kFdEps);
  }
  return grad;
}

TensorMap Inputs(const Case& c) {
  const Shape q = c.varlen() ? Shape{c.total_q, c.hq, c.d} : Shape{c.batch, c.sq, c.hq, c.d};
  const Shape k = c.varlen() ? Shape{c.total_k, c.hkv, c.d} : Shape{c.batch, c.sk, c.hkv, c.d};
  TensorMap in = {{"q", RandomTensor(DType::kF32, q, c.seed)},
                  {"k", RandomTensor(DType::kF32, k, c.seed + 1)},
                  {"v", RandomTensor(DType::kF32, k, c.seed + 2)}};
  if (c.varlen()) {
    const auto entries = static_cast<int64_t>(c.cu_q.size());
    in["cu_seqlens_q"] = Tensor::FromInts(DType::kI32, {entries}, c.cu_q);
    in["cu_seqlens_k"] = Tensor::FromInts(DType::kI64, {entries}, c.cu_k);
  }
  if (!c.bias.empty()) in["bias"] = RandomTensor(DType::kF32, c.bias, c.seed + 3);
  if (!c.q_seg.empty()) {
    in["q_segment_ids"] = Tensor::FromInts(DType::kI64, {c.batch, c.sq}, c.q_seg);
    in["kv_segment_ids"] = Tensor::FromInts(DType::kI32, {c.batch, c.sk}, c.kv_seg);
  }
  return in;
}

Attributes Params(const Case& c) {
  Attributes attrs = {{"causal", c.causal},
                      {"softmax_scale", c.scale},
                      {"window_left", c.left},
                      {"window_right", c.right},
                      {"logits_soft_cap", c.cap}};
  return attrs;
}

// Rows that see no key contribute nothing: their dq is exactly zero.
void ExpectHiddenRowsHaveZeroDq(const Case& c, const std::vector<double>& lse,
                                const std::vector<double>& dq) {
  for (int64_t n = 0; n < c.sequences(); ++n) {
    for (int64_t h = 0; h < c.hq; ++h) {
      for (int64_t i = 0; i < c.len_q(n); ++i) {
        const int64_t row = c.begin_q(n) + i;
        if (lse[c.varlen() ? h * c.total_q + row : (n * c.hq + h) * c.sq + i] != -kInf) continue;
        for (int64_t e = 0; e < c.d; ++e) ASSERT_EQ(dq[(row * c.hq + h) * c.d + e], 0.0) << row;
      }
    }
  }
}

// Runs the CPU forward (return_lse) and backward on random inputs of `c` and checks every
// gradient against finite differences of the float64 forward, which first must agree with the
// CPU forward. Returns the backward's outputs and the forward's lse.
std::pair<TensorMap, std::vector<double>> ExpectGradients(const Case& c) {
  TensorMap in = Inputs(c);
  Attributes fwd_params = Params(c);
  fwd_params["return_lse"] = true;
  absl::StatusOr<TensorMap> fwd = RunOnCpu(*MakeFlashAttention(), in, fwd_params, KernelConfig{});
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  if (!fwd.ok()) return {};
  Values x = {
      {"q", in.at("q").ToDoubles()}, {"k", in.at("k").ToDoubles()}, {"v", in.at("v").ToDoubles()}};
  if (!c.bias.empty()) x["bias"] = in.at("bias").ToDoubles();
  const Forward want = Attention(c, x);
  const AllCloseResult out =
      AllClose(fwd->at("out").ToDoubles(), want.out, kForwardRtol, kForwardAtol);
  EXPECT_TRUE(out.ok) << "forward out: " << out.message;
  const AllCloseResult lse =
      AllClose(fwd->at("lse").ToDoubles(), want.lse, kForwardRtol, kForwardAtol);
  EXPECT_TRUE(lse.ok) << "forward lse: " << lse.message;

  in["out"] = fwd->at("out");
  in["lse"] = fwd->at("lse");
  in["dout"] = RandomTensor(DType::kF32, in.at("q").shape(), c.seed + 4);
  Attributes params = Params(c);
  if (!c.bias.empty()) params["return_dbias"] = true;
  absl::StatusOr<TensorMap> got = RunOnCpu(*MakeFlashAttentionBwd(), in, params, KernelConfig{});
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return {};
  const std::vector<double> dout = in.at("dout").ToDoubles();
  for (const auto& [input, output] : std::map<std::string, std::string>{
           {"q", "dq"}, {"k", "dk"}, {"v", "dv"}, {"bias", "dbias"}}) {
    if (!x.contains(input)) {
      EXPECT_FALSE(got->contains(output));
      continue;
    }
    if (!got->contains(output)) {
      ADD_FAILURE() << "no " << output;
      continue;
    }
    EXPECT_EQ(got->at(output).spec(), in.at(input).spec()) << output;
    const std::vector<double> fd = FiniteDifferences(c, x, input, dout);
    const AllCloseResult close = AllClose(got->at(output).ToDoubles(), fd, kGradRtol, kGradAtol);
    EXPECT_TRUE(close.ok) << output << ": " << close.message;
  }
  ExpectHiddenRowsHaveZeroDq(c, want.lse, got->at("dq").ToDoubles());
  return {*std::move(got), want.lse};
}

int64_t HiddenRows(const std::vector<double>& lse) {
  int64_t count = 0;
  for (double x : lse) count += x == -kInf ? 1 : 0;
  return count;
}

Case Dense(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, uint64_t seed) {
  Case c;
  c.batch = batch;
  c.sq = sq;
  c.sk = sk;
  c.hq = hq;
  c.hkv = hkv;
  c.seed = seed;
  return c;
}

TEST(FlashAttentionBwdCpuTest, PlainAndUnequalLengths) {
  for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{5, 6}, {1, 1}, {7, 3}, {3, 9}}) {
    SCOPED_TRACE(::testing::Message() << "Sq=" << sq << " Sk=" << sk);
    ExpectGradients(Dense(2, sq, sk, 2, 2, 100 + sq * 10 + sk));
  }
}

TEST(FlashAttentionBwdCpuTest, Causal) {
  for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{5, 5}, {4, 7}, {7, 4}}) {
    SCOPED_TRACE(::testing::Message() << "Sq=" << sq << " Sk=" << sk);
    Case c = Dense(2, sq, sk, 2, 2, 200 + sq * 10 + sk);
    c.causal = true;
    const std::vector<double> lse = ExpectGradients(c).second;
    // With Sq > Sk the first Sq - Sk rows see no key.
    EXPECT_EQ(HiddenRows(lse), sq > sk ? 2 * 2 * (sq - sk) : 0);
  }
}

TEST(FlashAttentionBwdCpuTest, SlidingWindow) {
  const std::vector<std::pair<int64_t, int64_t>> windows = {{2, -1}, {1, 1}, {0, 2}, {-1, 0}};
  for (auto [left, right] : windows) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "left=" << left << " right=" << right << " causal=" << causal);
      Case c = Dense(1, 6, 8, 2, 2, 300 + left * 10 + right + (causal ? 50 : 0));
      c.left = left;
      c.right = right;
      c.causal = causal;
      ExpectGradients(c);
    }
  }
}

TEST(FlashAttentionBwdCpuTest, GroupedAndMultiQueryHeads) {
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {3, 1}}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "Hq=" << hq << " Hkv=" << hkv << " causal=" << causal);
      Case c = Dense(2, 5, 6, hq, hkv, 400 + hq * 10 + hkv + (causal ? 50 : 0));
      c.causal = causal;
      ExpectGradients(c);
    }
  }
}

TEST(FlashAttentionBwdCpuTest, VarlenWithEmptySequencesAndUnusedRows) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal=" << causal);
    Case c = Dense(0, 0, 0, 4, 2, causal ? 501 : 500);
    c.cu_q = {0, 3, 3, 8, 9};  // q lengths 3, 0, 5, 1 and 2 unused rows
    c.cu_k = {0, 4, 6, 6, 9};  // k lengths 4, 2, 0, 3 and 1 unused row
    c.total_q = 11;
    c.total_k = 10;
    c.causal = causal;
    const auto [got, lse] = ExpectGradients(c);
    // Sequence 2 (5 rows) sees no key, nor do the 2 unused rows.
    EXPECT_EQ(HiddenRows(lse), 4 * (5 + 2));
    // Keys of sequence 1 (no query) and the unused key row get zero gradients.
    const std::vector<double> dk = got.at("dk").ToDoubles(), dv = got.at("dv").ToDoubles();
    for (int64_t row : {4, 5, 9}) {
      for (int64_t e = 0; e < 2 * c.d; ++e) {
        ASSERT_EQ(dk[row * 2 * c.d + e], 0.0) << row;
        ASSERT_EQ(dv[row * 2 * c.d + e], 0.0) << row;
      }
    }
  }
}

TEST(FlashAttentionBwdCpuTest, SegmentIdsWithPadding) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal=" << causal);
    Case c = Dense(2, 6, 5, 2, 2, causal ? 601 : 600);
    c.q_seg = {1, 1, 2, 0, 2, 3,  //
               4, 0, 4, 5, 5, -1};
    c.kv_seg = {1, 2, 2, 1, 0,  //
                5, 4, 0, 5, 4};
    c.causal = causal;
    const std::vector<double> lse = ExpectGradients(c).second;
    // Padding rows (ids 0, -1) and id 3 (no key carries it) see nothing, on both heads.
    EXPECT_GE(HiddenRows(lse), 2 * 4);
  }
}

TEST(FlashAttentionBwdCpuTest, BiasBroadcastsAndItsGradientSums) {
  const int64_t b = 2, hq = 4;
  for (Shape bias :
       {Shape{b, hq, 5, 6}, Shape{1, hq, 5, 6}, Shape{b, 1, 5, 6}, Shape{1, 1, 5, 6}}) {
    SCOPED_TRACE(ShapeString(bias));
    Case c = Dense(b, 5, 6, hq, 2, 700 + bias[0] * 10 + bias[1]);
    c.bias = bias;
    ExpectGradients(c);
    c.cap = 1.5;  // the cap applies before the bias
    c.causal = true;
    c.seed += 100;
    ExpectGradients(c);
  }
}

TEST(FlashAttentionBwdCpuTest, SoftCapAndExplicitScale) {
  for (double cap : {0.0, 0.5, 4.0}) {
    for (double scale : {0.0, 0.3, -0.7, 2.0}) {
      SCOPED_TRACE(::testing::Message() << "cap=" << cap << " scale=" << scale);
      Case c = Dense(2, 4, 7, 2, 1, 800 + static_cast<uint64_t>(cap * 10 + scale * 100 + 100));
      c.cap = cap;
      c.scale = scale;
      ExpectGradients(c);
    }
  }
}

TEST(FlashAttentionBwdCpuTest, EveryOptionAtOnce) {
  Case c = Dense(2, 6, 7, 4, 2, 900);
  c.causal = true;
  c.left = 3;
  c.right = 0;
  c.scale = 0.4;
  c.cap = 2.0;
  c.bias = {1, 4, 6, 7};
  c.q_seg = {1, 1, 1, 2, 2, 0,  //
             3, 3, 3, 3, 4, 4};
  c.kv_seg = {1, 1, 2, 2, 2, 2, 1,  //
              3, 4, 3, 3, 4, 4, 0};
  ExpectGradients(c);
}

}  // namespace
}  // namespace kernelserve
