#include "kernels/flash_attention/cpu/flash_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/runtime/cpu/checks.h"
#include "tests/support/testing.h"

namespace kernelserve::cpu {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One attention problem. Dense: q [B*Sq,Hq,D], k/v [B*Sk,Hkv,D]; varlen when cu_q is set.
struct Attn {
  DType dtype = DType::kF32;
  int64_t batch = 1;
  int64_t sq = 0;
  int64_t sk = 0;
  int64_t hq = 2;
  int64_t hkv = 2;
  int64_t d = 16;
  std::vector<int64_t> cu_q;  // varlen when not empty
  std::vector<int64_t> cu_k;
  int64_t total_q = 0;  // varlen rows of q / k
  int64_t total_k = 0;
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  float scale = 0.0f;  // 0 = 1/sqrt(D)
  float softcap = 0.0f;
  int64_t bias_batch = 0;  // bias [bias_batch, bias_heads, Sq, Sk]; 0 = no bias
  int64_t bias_heads = 0;
  std::vector<int64_t> q_seg;  // [B,Sq] and [B,Sk]; empty = none
  std::vector<int64_t> kv_seg;
  uint64_t seed = 1;

  bool varlen() const { return !cu_q.empty(); }
  int64_t rows_q() const { return varlen() ? total_q : batch * sq; }
  int64_t rows_k() const { return varlen() ? total_k : batch * sk; }
  int64_t sequences() const { return varlen() ? static_cast<int64_t>(cu_q.size()) - 1 : batch; }
  float resolved_scale() const { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(d)); }
};

// A dense problem with the other fields at their defaults.
Attn Dense(DType dtype, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d) {
  Attn a;
  a.dtype = dtype;
  a.batch = batch;
  a.sq = sq;
  a.sk = sk;
  a.hq = hq;
  a.hkv = hkv;
  a.d = d;
  return a;
}

KernelConfig Tiles(int block_q, int block_k, int threads = 0) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.named["threads"] = threads;
  return config;
}

struct Inputs {
  Tensor q, k, v, bias;
};

Inputs MakeInputs(const Attn& a) {
  Inputs in;
  in.q = RandomTensor(a.dtype, {a.rows_q(), a.hq, a.d}, a.seed);
  in.k = RandomTensor(a.dtype, {a.rows_k(), a.hkv, a.d}, a.seed + 1);
  in.v = RandomTensor(a.dtype, {a.rows_k(), a.hkv, a.d}, a.seed + 2);
  if (a.bias_batch > 0) {
    in.bias = RandomTensor(DType::kF32, {a.bias_batch, a.bias_heads, a.sq, a.sk}, a.seed + 3, -2.0f,
                           2.0f);
  }
  return in;
}

struct Result {
  std::vector<double> out;  // [rows_q, Hq, D]
  std::vector<double> lse;  // dense [B,Hq,Sq], varlen [Hq,Tq]
};

absl::StatusOr<Result> RunAttention(const Attn& a, const Inputs& in, const KernelConfig& config) {
  Tensor out = Tensor::Empty(a.dtype, in.q.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out.SetFloat(i, std::nanf(""));
  std::vector<float> lse(static_cast<size_t>(a.rows_q() * a.hq), std::nanf(""));
  FlashAttentionArgs args;
  args.dtype = a.dtype;
  args.q = in.q.data();
  args.k = in.k.data();
  args.v = in.v.data();
  args.out = out.data();
  args.lse = lse.data();
  args.total_q = a.rows_q();
  args.total_k = a.rows_k();
  args.num_heads_q = a.hq;
  args.num_heads_kv = a.hkv;
  args.head_dim = a.d;
  args.num_sequences = a.sequences();
  args.seq_len_q = a.varlen() ? 0 : a.sq;
  args.seq_len_k = a.varlen() ? 0 : a.sk;
  args.cu_seqlens_q = a.varlen() ? a.cu_q.data() : nullptr;
  args.cu_seqlens_k = a.varlen() ? a.cu_k.data() : nullptr;
  args.softmax_scale = a.resolved_scale();
  args.causal = a.causal;
  args.window_left = a.window_left;
  args.window_right = a.window_right;
  args.softcap = a.softcap;
  if (a.bias_batch > 0) {
    args.bias = in.bias.data_as<float>();
    args.bias_head_stride = a.bias_heads == 1 ? 0 : a.sq * a.sk;
    args.bias_batch_stride = a.bias_batch == 1 ? 0 : a.bias_heads * a.sq * a.sk;
  }
  if (!a.q_seg.empty()) {
    args.q_segment_ids = a.q_seg.data();
    args.kv_segment_ids = a.kv_seg.data();
  }
  absl::Status status = FlashAttentionCpu(args, config);
  if (!status.ok()) return status;
  Result result{out.ToDoubles(), {}};
  for (float x : lse) result.lse.push_back(x);
  return result;
}

bool Visible(const Attn& a, int64_t n, int64_t i, int64_t j, int64_t ql, int64_t kl) {
  const int64_t diagonal = i + kl - ql;
  if (a.causal && j > diagonal) return false;
  if (a.window_left >= 0 && j < diagonal - a.window_left) return false;
  if (a.window_right >= 0 && j > diagonal + a.window_right) return false;
  if (!a.q_seg.empty()) {
    const int64_t id = a.q_seg[n * a.sq + i];
    if (id <= 0 || a.kv_seg[n * a.sk + j] != id) return false;
  }
  return true;
}

// Attention in double, one query row at a time, straight from the definitions.
Result Reference(const Attn& a, const Inputs& in) {
  const std::vector<double> q = in.q.ToDoubles(), k = in.k.ToDoubles(), v = in.v.ToDoubles();
  const std::vector<double> bias = a.bias_batch > 0 ? in.bias.ToDoubles() : std::vector<double>();
  Result r{std::vector<double>(static_cast<size_t>(a.rows_q() * a.hq * a.d), 0.0),
           std::vector<double>(static_cast<size_t>(a.rows_q() * a.hq), -kInf)};
  const double scale = a.resolved_scale();
  for (int64_t n = 0; n < a.sequences(); ++n) {
    const int64_t qb = a.varlen() ? a.cu_q[n] : n * a.sq;
    const int64_t ql = a.varlen() ? a.cu_q[n + 1] - qb : a.sq;
    const int64_t kb = a.varlen() ? a.cu_k[n] : n * a.sk;
    const int64_t kl = a.varlen() ? a.cu_k[n + 1] - kb : a.sk;
    for (int64_t h = 0; h < a.hq; ++h) {
      const int64_t kh = h / (a.hq / a.hkv);
      for (int64_t i = 0; i < ql; ++i) {
        std::vector<double> logits(static_cast<size_t>(kl), -kInf);
        double max = -kInf;
        for (int64_t j = 0; j < kl; ++j) {
          if (!Visible(a, n, i, j, ql, kl)) continue;
          double dot = 0;
          for (int64_t x = 0; x < a.d; ++x) {
            dot += q[((qb + i) * a.hq + h) * a.d + x] * k[((kb + j) * a.hkv + kh) * a.d + x];
          }
          double s = scale * dot;
          if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
          if (a.bias_batch > 0) {
            const int64_t bb = a.bias_batch == 1 ? 0 : n, bh = a.bias_heads == 1 ? 0 : h;
            s += bias[((bb * a.bias_heads + bh) * a.sq + i) * a.sk + j];
          }
          logits[j] = s;
          max = std::max(max, s);
        }
        if (max == -kInf) continue;
        double sum = 0;
        double* o = &r.out[((qb + i) * a.hq + h) * a.d];
        for (int64_t j = 0; j < kl; ++j) {
          const double p = std::exp(logits[j] - max);
          sum += p;
          for (int64_t x = 0; x < a.d; ++x) o[x] += p * v[((kb + j) * a.hkv + kh) * a.d + x];
        }
        for (int64_t x = 0; x < a.d; ++x) o[x] /= sum;
        const int64_t at = a.varlen() ? h * a.total_q + qb + i : (n * a.hq + h) * a.sq + i;
        r.lse[at] = max + std::log(sum);
      }
    }
  }
  return r;
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 5e-3;
    case DType::kBF16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

// Runs `a` and checks out and lse against the reference; returns the kernel's result.
Result ExpectMatches(const Attn& a, const KernelConfig& config = KernelConfig{}) {
  const Inputs in = MakeInputs(a);
  absl::StatusOr<Result> got = RunAttention(a, in, config);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return {};
  const Result want = Reference(a, in);
  for (double x : got->out) {
    EXPECT_FALSE(std::isnan(x));
    if (std::isnan(x)) break;
  }
  EXPECT_LT(RelativeError(got->out, want.out), Tolerance(a.dtype));
  const AllCloseResult lse = AllClose(got->lse, want.lse, 1e-5, 1e-4);
  EXPECT_TRUE(lse.ok) << "lse: " << lse.message;
  return *got;
}

// The number of (row, head) pairs whose lse is -inf (rows that see no key).
int64_t HiddenRows(const Result& r) {
  int64_t count = 0;
  for (double x : r.lse) count += x == -kInf ? 1 : 0;
  return count;
}

TEST(FlashAttentionCpuTest, MatchesReferenceOnOddShapes) {
  uint64_t seed = 10;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1}, {7, 7}, {129, 129}, {7, 129}, {129, 7}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t d : {16, 32, 64, 80, 128}) {
      for (size_t l = 0; l < lengths.size(); ++l) {
        Attn a;
        a.dtype = dtype;
        a.batch = (l % 2 == 0) ? 3 : 1;
        a.sq = lengths[l].first;
        a.sk = lengths[l].second;
        a.d = d;
        a.seed = seed += 3;
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " B=" << a.batch << " Sq=" << a.sq
                                        << " Sk=" << a.sk << " D=" << d);
        ExpectMatches(a);
      }
    }
  }
}

TEST(FlashAttentionCpuTest, CausalIsAlignedBottomRight) {
  for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{7, 19}, {19, 7}, {33, 33}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "Sq=" << sq << " Sk=" << sk);
      Attn a = Dense(dtype, 2, sq, sk, 2, 2, 32);
      a.causal = true;
      const Result r = ExpectMatches(a);
      // With Sq > Sk the first Sq - Sk query rows see no key: B * Hq * (Sq - Sk) hidden rows.
      EXPECT_EQ(HiddenRows(r), sq > sk ? 2 * 2 * (sq - sk) : 0);
    }
  }
}

TEST(FlashAttentionCpuTest, SlidingWindowLeftRightAndWithCausal) {
  const std::vector<std::pair<int64_t, int64_t>> windows = {{0, 0}, {3, -1}, {-1, 2}, {5, 1}};
  for (auto [left, right] : windows) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "left=" << left << " right=" << right << " causal=" << causal);
      Attn a = Dense(DType::kF32, 1, 40, 50, 2, 2, 16);
      a.causal = causal;
      a.window_left = left;
      a.window_right = right;
      ExpectMatches(a, Tiles(16, 16));
    }
  }
}

TEST(FlashAttentionCpuTest, SoftCapAndExplicitScale) {
  for (float cap : {0.0f, 0.5f, 5.0f}) {
    for (float scale : {0.0f, 0.3f, 2.0f}) {
      SCOPED_TRACE(testing::Message() << "cap=" << cap << " scale=" << scale);
      Attn a = Dense(DType::kF32, 2, 9, 23, 2, 2, 64);
      a.scale = scale;
      a.softcap = cap;
      ExpectMatches(a);
    }
  }
}

TEST(FlashAttentionCpuTest, GroupedAndMultiQueryHeads) {
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {4, 1}, {6, 3}}) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      SCOPED_TRACE(testing::Message() << "Hq=" << hq << " Hkv=" << hkv);
      Attn a = Dense(dtype, 2, 17, 31, hq, hkv, 32);
      a.causal = true;
      ExpectMatches(a);
    }
  }
}

TEST(FlashAttentionCpuTest, BiasBroadcastsOverBatchAndHeads) {
  for (auto [bb, bh] : std::vector<std::pair<int64_t, int64_t>>{{3, 4}, {1, 4}, {3, 1}, {1, 1}}) {
    SCOPED_TRACE(testing::Message() << "bias [" << bb << "," << bh << ",Sq,Sk]");
    Attn a = Dense(DType::kF32, 3, 11, 19, 4, 2, 16);
    a.bias_batch = bb;
    a.bias_heads = bh;
    a.softcap = 1.0f;  // the cap applies before the bias
    ExpectMatches(a);
  }
}

TEST(FlashAttentionCpuTest, SegmentIdsWithPadding) {
  Attn a = Dense(DType::kF32, 2, 12, 10, 2, 2, 16);
  a.q_seg = {1, 1, 1, 2, 2, 0, -1, 3, 3, 3, 3, 0,  //
             5, 5, 5, 5, 6, 6, 6,  6, 6, 0, 0, 7};
  a.kv_seg = {1, 1, 2, 2, 2, 2, 3, 0, 0, 3,  //
              5, 6, 6, 6, 5, 0, 0, 0, 0, 0};
  const Result r = ExpectMatches(a);
  // Padding rows (ids 0, -1) and id 7 (no key carries it) see nothing, on both heads.
  EXPECT_EQ(HiddenRows(r), 2 * (3 + 3));
  a.causal = true;
  ExpectMatches(a);
}

TEST(FlashAttentionCpuTest, VarlenWithEmptySequencesAndUnusedRows) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " causal=" << causal);
      Attn a = Dense(dtype, 0, 0, 0, 4, 2, 80);
      a.cu_q = {0, 5, 5, 30, 31, 70};   // q lengths 5, 0, 25, 1, 39 and 3 unused rows
      a.cu_k = {0, 9, 12, 12, 13, 50};  // k lengths 9, 3, 0, 1, 37
      a.total_q = 73;
      a.total_k = 52;
      a.causal = causal;
      const Result r = ExpectMatches(a, Tiles(16, 32));
      // Sequence 2 has no keys (25 rows) and 3 rows are past the last sequence; with causal,
      // sequence 4 (39 queries, 37 keys) also hides its first 2 rows.
      EXPECT_EQ(HiddenRows(r), 4 * (25 + 3 + (causal ? 2 : 0)));
      for (int64_t i = 70 * 4 * 80; i < 73 * 4 * 80; ++i) ASSERT_EQ(r.out[i], 0.0) << i;
    }
  }
}

TEST(FlashAttentionCpuTest, FullyMaskedRowsGiveZerosAndMinusInfinity) {
  // The window sees keys [i + 8 - 3 - 0, ...] past the end of short rows: with Sq = 12 and
  // Sk = 4, causal hides rows 0..7 entirely.
  Attn a = Dense(DType::kF16, 1, 12, 4, 2, 2, 16);
  a.causal = true;
  absl::StatusOr<Result> r = RunAttention(a, MakeInputs(a), KernelConfig{});
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < 8 * 2 * 16; ++i) ASSERT_EQ(r->out[i], 0.0) << i;
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(r->lse[h * 12 + i] == -kInf, i < 8) << "head " << h << " row " << i;
    }
  }
  for (double x : r->out) ASSERT_FALSE(std::isnan(x));
}

TEST(FlashAttentionCpuTest, NoKeysAtAllGivesZeros) {
  const Attn a = Dense(DType::kBF16, 2, 5, 0, 2, 2, 16);
  const Result r = ExpectMatches(a);
  EXPECT_EQ(HiddenRows(r), 2 * 2 * 5);
  for (double x : r.out) ASSERT_EQ(x, 0.0);
}

TEST(FlashAttentionCpuTest, MinusInfinityBiasHidesKeysWithoutNaN) {
  Attn a = Dense(DType::kF32, 1, 6, 9, 1, 1, 16);
  a.bias_batch = 1;
  a.bias_heads = 1;
  Inputs in = MakeInputs(a);
  float* bias = in.bias.data_as<float>();
  for (int64_t j = 0; j < 9; ++j) bias[2 * 9 + j] = -std::numeric_limits<float>::infinity();
  bias[4 * 9 + 3] = -std::numeric_limits<float>::infinity();
  absl::StatusOr<Result> got = RunAttention(a, in, Tiles(0, 4));
  ASSERT_TRUE(got.ok()) << got.status();
  const Result want = Reference(a, in);
  EXPECT_LT(RelativeError(got->out, want.out), 1e-5);
  EXPECT_TRUE(AllClose(got->lse, want.lse, 1e-5, 1e-4).ok);
  EXPECT_EQ(got->lse[2], -kInf);
  for (int64_t x = 0; x < 16; ++x) EXPECT_EQ(got->out[2 * 16 + x], 0.0);
}

TEST(FlashAttentionCpuTest, EveryTileSizeAndThreadCountMatches) {
  Attn a = Dense(DType::kBF16, 2, 45, 77, 4, 2, 64);
  a.causal = true;
  a.window_left = 30;
  for (int block_q : {1, 16, 64}) {
    for (int block_k : {1, 32, 128}) {
      for (int threads : {1, 3}) {
        SCOPED_TRACE(testing::Message() << block_q << "x" << block_k << " threads=" << threads);
        KernelConfig config = Tiles(block_q, block_k, threads);
        config.platform = "cpu";
        ExpectMatches(a, config);
      }
    }
  }
}

TEST(FlashAttentionCpuTest, RejectsBadOffsetsAndConfigs) {
  Attn a = Dense(DType::kF32, 0, 0, 0, 2, 1, 16);
  a.cu_q = {0, 4, 9};
  a.cu_k = {0, 4, 8};
  a.total_q = 8;  // cu_q ends past it
  a.total_k = 8;
  const Inputs in = MakeInputs(a);
  absl::StatusOr<Result> r = RunAttention(a, in, KernelConfig{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("cu_seqlens_q"));
  a.cu_q = {0, 4, 8};
  a.cu_k = {0, 5, 3};
  r = RunAttention(a, in, KernelConfig{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("cu_seqlens_k"));
  a.cu_k = {0, 4, 8};
  r = RunAttention(a, in, Tiles(-2, 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("block_q"));
  r = RunAttention(a, in, Tiles(2147483647, 2147483647));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("block_q=2147483647"));
  EXPECT_THAT(r.status().message(), HasSubstr("0..1024"));
  r = RunAttention(a, in, Tiles(0, 0, 1000000000));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("threads"));
  // The largest tiles and thread count allowed run, clamped to the problem.
  EXPECT_TRUE(
      RunAttention(a, in, Tiles(kMaxCpuAttentionTile, kMaxCpuAttentionTile, kMaxCpuThreads)).ok());
  KernelConfig cudnn;
  cudnn.platform = "cudnn";
  r = RunAttention(a, in, cudnn);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RunAttention(a, in, KernelConfig{}).ok());
}

}  // namespace
}  // namespace kernelserve::cpu
