#include "kernels/flash_attention/cpu/flash_attention_bwd_passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/runtime/cpu/float_convert.h"

namespace kernelserve::cpu::attention_bwd {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// What one visible (query row, key) pair adds to the gradients.
struct PairTerms {
  double p = 0.0;       // P_ij
  double ds = 0.0;      // dS_ij, the gradient of the logit (and of the bias)
  double ds_raw = 0.0;  // dS_ij through the soft cap: the gradient of scale * q.k
};

// `x` rounded to float toward zero, with the last bit set when inexact (round to odd):
// rounding that float to f16 or bf16 gives `x` rounded once to nearest.
float RoundToOdd(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || std::isnan(x)) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(x)) f = std::nextafter(f, 0.0f);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Elements [offset, offset + n) of `dst` = scale * src rounded once to `dtype`.
void StoreRow(DType dtype, const double* src, int64_t n, double scale, float* tmp, void* dst,
              int64_t offset) {
  for (int64_t x = 0; x < n; ++x) {
    const double value = scale * src[x];
    tmp[x] = dtype == DType::kF32 ? static_cast<float>(value) : RoundToOdd(value);
  }
  StoreFromFloat(dtype, tmp, n, dst, offset);
}

// dst[0, n) = elements [offset, offset + n) of `src` as double.
void LoadRow(DType dtype, const void* src, int64_t offset, int64_t n, float* tmp, double* dst) {
  LoadAsFloat(dtype, src, offset, n, tmp);
  for (int64_t x = 0; x < n; ++x) dst[x] = tmp[x];
}

double Dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t x = 0; x < n; ++x) sum += a[x] * b[x];
  return sum;
}

// Fills w.rows (and the q and dout rows they point to) with query rows [i0, i0 + rows) of
// sequence `seq`, head `head`.
void LoadQueryRows(const Plan& plan, int64_t seq, const Span& span, int64_t head, int64_t i0,
                   int64_t rows, Scratch& w) {
  const FlashAttentionArgs& a = plan.args->fwd;
  const int64_t d = a.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const int64_t row = span.q_begin + i;
    const int64_t at = (row * a.num_heads_q + head) * d;
    QueryRow& q = w.rows[r];
    q.q = w.q.data() + r * d;
    q.dout = w.dout.data() + r * d;
    LoadRow(a.dtype, a.q, at, d, w.f.data(), w.q.data() + r * d);
    LoadRow(a.dtype, plan.args->dout, at, d, w.f.data(), w.dout.data() + r * d);
    LoadRow(a.dtype, plan.args->out, at, d, w.f.data(), w.out.data());
    q.delta = Dot(q.dout, w.out.data(), d);
    q.lse = a.cu_seqlens_q != nullptr
                ? plan.args->lse[head * a.total_q + row]
                : plan.args->lse[(seq * a.num_heads_q + head) * a.seq_len_q + i];
    const int64_t diagonal = i + span.k_len - span.q_len;
    q.lo = 0;
    q.hi = span.k_len - 1;
    if (a.causal) q.hi = std::min(q.hi, diagonal);
    if (a.window_right >= 0) q.hi = std::min(q.hi, diagonal + a.window_right);
    if (a.window_left >= 0) q.lo = std::max(q.lo, diagonal - a.window_left);
    if (q.lse == kNegInf) q.hi = q.lo - 1;  // the row saw no key: it contributes nothing
    q.segment = a.q_segment_ids == nullptr ? 0 : a.q_segment_ids[seq * a.seq_len_q + i];
    q.bias = a.bias == nullptr
                 ? nullptr
                 : a.bias + seq * a.bias_batch_stride + head * a.bias_head_stride + i * span.k_len;
  }
}

// w.k, w.v = key rows [j0, j0 + cols) of the span, kv head `kv_head`.
void LoadKeyRows(const Plan& plan, const Span& span, int64_t kv_head, int64_t j0, int64_t cols,
                 Scratch& w) {
  const FlashAttentionArgs& a = plan.args->fwd;
  const int64_t d = a.head_dim;
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t at = ((span.k_begin + j0 + c) * a.num_heads_kv + kv_head) * d;
    LoadRow(a.dtype, a.k, at, d, w.f.data(), w.k.data() + c * d);
    LoadRow(a.dtype, a.v, at, d, w.f.data(), w.v.data() + c * d);
  }
}

// The terms of query row `row` and key j (k and v its rows); false when the row does not see
// the key (P = 0).
bool Pair(const Plan& plan, int64_t seq, const QueryRow& row, int64_t j, const double* k,
          const double* v, PairTerms& t) {
  const FlashAttentionArgs& a = plan.args->fwd;
  if (j < row.lo || j > row.hi) return false;
  if (a.q_segment_ids != nullptr &&
      (row.segment <= 0 || a.kv_segment_ids[seq * a.seq_len_k + j] != row.segment)) {
    return false;
  }
  const double raw = plan.scale * Dot(row.q, k, a.head_dim);
  double logit = raw;
  double slope = 1.0;  // d logit / d raw
  if (plan.softcap > 0.0) {
    const double capped = std::tanh(raw / plan.softcap);
    logit = plan.softcap * capped;
    slope = 1.0 - capped * capped;
  }
  if (row.bias != nullptr) logit += row.bias[j];
  if (logit == kNegInf) return false;  // a -inf bias hides the key
  t.p = std::exp(logit - row.lse);
  t.ds = t.p * (Dot(row.dout, v, a.head_dim) - row.delta);
  t.ds_raw = t.ds * slope;
  return true;
}

}  // namespace

Span SpanOf(const FlashAttentionArgs& a, int64_t seq) {
  if (a.cu_seqlens_q != nullptr) {
    return {a.cu_seqlens_q[seq], a.cu_seqlens_q[seq + 1] - a.cu_seqlens_q[seq], a.cu_seqlens_k[seq],
            a.cu_seqlens_k[seq + 1] - a.cu_seqlens_k[seq]};
  }
  return {seq * a.seq_len_q, a.seq_len_q, seq * a.seq_len_k, a.seq_len_k};
}

void ResizeScratch(const Plan& plan, int64_t dbias_len, Scratch& w) {
  const auto d = static_cast<size_t>(plan.args->fwd.head_dim);
  const auto bq = static_cast<size_t>(plan.block_q);
  const auto bk = static_cast<size_t>(plan.block_k);
  const auto sk = static_cast<size_t>(dbias_len);
  w.f.resize(std::max(d, sk));
  w.out.resize(d);
  w.q.resize(bq * d);
  w.dout.resize(bq * d);
  w.rows.resize(bq);
  w.k.resize(bk * d);
  w.v.resize(bk * d);
  w.acc.resize(std::max(std::max(bq, bk) * d, sk));
  w.acc_v.resize(bk * d);
}

void RunDq(const Plan& plan, const Item& item, Scratch& w) {
  const FlashAttentionArgs& a = plan.args->fwd;
  const int64_t d = a.head_dim;
  const Span span = SpanOf(a, item.seq);
  const int64_t rows = std::min(plan.block_q, span.q_len - item.start);
  LoadQueryRows(plan, item.seq, span, item.head, item.start, rows, w);
  std::fill(w.acc.begin(), w.acc.begin() + rows * d, 0.0);
  int64_t j_begin = span.k_len;
  int64_t j_end = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (w.rows[r].hi < w.rows[r].lo) continue;
    j_begin = std::min(j_begin, std::max<int64_t>(w.rows[r].lo, 0));
    j_end = std::max(j_end, std::min(w.rows[r].hi + 1, span.k_len));
  }
  PairTerms t;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += plan.block_k) {
    const int64_t cols = std::min(plan.block_k, j_end - j0);
    LoadKeyRows(plan, span, item.head / plan.group, j0, cols, w);
    for (int64_t r = 0; r < rows; ++r) {
      double* dq = w.acc.data() + r * d;
      for (int64_t c = 0; c < cols; ++c) {
        if (!Pair(plan, item.seq, w.rows[r], j0 + c, w.k.data() + c * d, w.v.data() + c * d, t)) {
          continue;
        }
        const double* k = w.k.data() + c * d;
        for (int64_t x = 0; x < d; ++x) dq[x] += t.ds_raw * k[x];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = span.q_begin + item.start + r;
    StoreRow(a.dtype, w.acc.data() + r * d, d, plan.scale, w.f.data(), plan.args->dq,
             (row * a.num_heads_q + item.head) * d);
  }
}

void RunDkDv(const Plan& plan, const Item& item, Scratch& w) {
  const FlashAttentionArgs& a = plan.args->fwd;
  const int64_t d = a.head_dim;
  const Span span = SpanOf(a, item.seq);
  const int64_t cols = std::min(plan.block_k, span.k_len - item.start);
  LoadKeyRows(plan, span, item.head, item.start, cols, w);
  std::fill(w.acc.begin(), w.acc.begin() + cols * d, 0.0);
  std::fill(w.acc_v.begin(), w.acc_v.begin() + cols * d, 0.0);
  PairTerms t;
  for (int64_t head = item.head * plan.group; head < (item.head + 1) * plan.group; ++head) {
    for (int64_t i0 = 0; i0 < span.q_len; i0 += plan.block_q) {
      const int64_t rows = std::min(plan.block_q, span.q_len - i0);
      LoadQueryRows(plan, item.seq, span, head, i0, rows, w);
      for (int64_t r = 0; r < rows; ++r) {
        const QueryRow& row = w.rows[r];
        for (int64_t c = 0; c < cols; ++c) {
          const double* k = w.k.data() + c * d;
          if (!Pair(plan, item.seq, row, item.start + c, k, w.v.data() + c * d, t)) continue;
          double* dk = w.acc.data() + c * d;
          double* dv = w.acc_v.data() + c * d;
          for (int64_t x = 0; x < d; ++x) {
            dk[x] += t.ds_raw * row.q[x];
            dv[x] += t.p * row.dout[x];
          }
        }
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t at = ((span.k_begin + item.start + c) * a.num_heads_kv + item.head) * d;
    StoreRow(a.dtype, w.acc.data() + c * d, d, plan.scale, w.f.data(), plan.args->dk, at);
    StoreRow(a.dtype, w.acc_v.data() + c * d, d, 1.0, w.f.data(), plan.args->dv, at);
  }
}

void RunDbiasRow(const Plan& plan, int64_t index, Scratch& w) {
  const FlashAttentionBwdArgs& args = *plan.args;
  const FlashAttentionArgs& a = args.fwd;
  const int64_t sq = a.seq_len_q;
  const int64_t sk = a.seq_len_k;
  const int64_t i = index % sq;
  const int64_t bh = (index / sq) % args.dbias_heads;
  const int64_t bb = index / (sq * args.dbias_heads);
  const bool all_b = args.dbias_batch == 1;
  const bool all_h = args.dbias_heads == 1;
  std::fill(w.acc.begin(), w.acc.begin() + sk, 0.0);
  PairTerms t;
  for (int64_t b = all_b ? 0 : bb; b < (all_b ? a.num_sequences : bb + 1); ++b) {
    const Span span = SpanOf(a, b);
    for (int64_t h = all_h ? 0 : bh; h < (all_h ? a.num_heads_q : bh + 1); ++h) {
      LoadQueryRows(plan, b, span, h, i, 1, w);
      const QueryRow& row = w.rows[0];
      for (int64_t j0 = std::max<int64_t>(row.lo, 0); j0 <= std::min(row.hi, sk - 1);
           j0 += plan.block_k) {
        const int64_t cols = std::min(plan.block_k, std::min(row.hi, sk - 1) + 1 - j0);
        LoadKeyRows(plan, span, h / plan.group, j0, cols, w);
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t at = c * a.head_dim;
          if (Pair(plan, b, row, j0 + c, w.k.data() + at, w.v.data() + at, t)) {
            w.acc[j0 + c] += t.ds;
          }
        }
      }
    }
  }
  StoreRow(DType::kF32, w.acc.data(), sk, 1.0, w.f.data(), args.dbias, index * sk);
}

}  // namespace kernelserve::cpu::attention_bwd
