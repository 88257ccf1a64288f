#include "kernels/paged_attention/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/status_macros.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"

namespace kernelserve::cpu {
namespace {

// The element offset of (token t of sequence b, kv head h, 0) in a cache.
int64_t CacheOffset(const PagedAttentionArgs& a, int64_t b, int64_t t, int64_t h) {
  const int64_t page = a.block_table[b * a.max_pages + t / a.page_size];
  return ((page * a.page_size + t % a.page_size) * a.num_heads_kv + h) * a.head_dim;
}

// The keys query i of sequence b (length len) sees: [*lo, *hi]; empty when lo > hi.
void VisibleKeys(const PagedAttentionArgs& a, int64_t len, int64_t i, int64_t* lo, int64_t* hi) {
  const int64_t pos = len - a.seq_len_q + i;
  *lo = 0;
  *hi = len - 1;
  if (a.causal) *hi = std::min(*hi, pos);
  if (a.window_left >= 0) *lo = std::max(*lo, pos - a.window_left);
  if (a.window_right >= 0) *hi = std::min(*hi, pos + a.window_right);
}

// The scale of kv head h of a cache: 1 when the cache has none (not fp8, or no scale given).
float HeadScale(const float* scale, int64_t h) { return scale == nullptr ? 1.0f : scale[h]; }

// One (sequence, q head) work item: every query row of it. `row` and `acc` are scratch of D.
void AttendHead(const PagedAttentionArgs& a, int64_t b, int64_t hq, std::vector<float>& row,
                std::vector<double>& acc, std::vector<double>& logits) {
  const int64_t d = a.head_dim;
  const int64_t hkv = hq / (a.num_heads_q / a.num_heads_kv);
  const int64_t len = a.cache_seqlens[b];
  // Each cache value is float(element) * scale; the head's scale is one factor of every
  // product, so it multiplies the dot product and the weighted sum of values once (in double:
  // the reference's rounding, not a GPU's).
  const double k_scale = HeadScale(a.k_scale, hkv);
  const double v_scale = HeadScale(a.v_scale, hkv);
  std::vector<float> q(static_cast<size_t>(d));
  std::vector<float> zeros(static_cast<size_t>(d), 0.0f);
  for (int64_t i = 0; i < a.seq_len_q; ++i) {
    const int64_t q_offset = ((b * a.seq_len_q + i) * a.num_heads_q + hq) * d;
    LoadAsFloat(a.dtype, a.q, q_offset, d, q.data());
    int64_t lo = 0;
    int64_t hi = -1;
    VisibleKeys(a, len, i, &lo, &hi);
    float* lse = a.lse == nullptr ? nullptr : a.lse + (b * a.num_heads_q + hq) * a.seq_len_q + i;
    if (lo > hi) {
      StoreFromFloat(a.dtype, zeros.data(), d, a.out, q_offset);
      if (lse != nullptr) *lse = -std::numeric_limits<float>::infinity();
      continue;
    }
    logits.assign(static_cast<size_t>(hi - lo + 1), 0.0);
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int64_t t = lo; t <= hi; ++t) {
      LoadAsFloat(a.cache_dtype, a.k_cache, CacheOffset(a, b, t, hkv), d, row.data());
      double s = 0.0;
      for (int64_t x = 0; x < d; ++x) s += static_cast<double>(q[x]) * row[x];
      s *= k_scale * a.softmax_scale;
      if (a.softcap > 0.0) s = a.softcap * std::tanh(s / a.softcap);
      logits[static_cast<size_t>(t - lo)] = s;
      max_logit = std::max(max_logit, s);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0.0;
    for (int64_t t = lo; t <= hi; ++t) {
      const double p = std::exp(logits[static_cast<size_t>(t - lo)] - max_logit);
      sum += p;
      LoadAsFloat(a.cache_dtype, a.v_cache, CacheOffset(a, b, t, hkv), d, row.data());
      for (int64_t x = 0; x < d; ++x) acc[static_cast<size_t>(x)] += p * row[x];
    }
    for (int64_t x = 0; x < d; ++x) {
      row[static_cast<size_t>(x)] = static_cast<float>(acc[static_cast<size_t>(x)] * v_scale / sum);
    }
    StoreFromFloat(a.dtype, row.data(), d, a.out, q_offset);
    if (lse != nullptr) *lse = static_cast<float>(max_logit + std::log(sum));
  }
}

// Writes the head_dim elements of `src` at `src_offset` into `cache` at `dst_offset`: copied when
// the cache has q's dtype, else quantized as fp8(float(x) / scale) with the division in float,
// as the GPU divides, so that both write the same bytes. `row` is scratch of head_dim.
void AppendRow(const PagedAttentionArgs& a, const void* src, int64_t src_offset, void* cache,
               int64_t dst_offset, float scale, std::vector<float>& row) {
  if (!IsFp8(a.cache_dtype)) {
    const size_t item = ItemSize(a.dtype);
    std::memcpy(static_cast<char*>(cache) + static_cast<size_t>(dst_offset) * item,
                static_cast<const char*>(src) + static_cast<size_t>(src_offset) * item,
                static_cast<size_t>(a.head_dim) * item);
    return;
  }
  LoadAsFloat(a.dtype, src, src_offset, a.head_dim, row.data());
  for (float& x : row) x /= scale;
  StoreFromFloat(a.cache_dtype, row.data(), a.head_dim, cache, dst_offset);
}

}  // namespace

void PagedAppendCpu(const PagedAttentionArgs& a) {
  if (a.k == nullptr || a.v == nullptr) return;
  std::vector<float> row(static_cast<size_t>(a.head_dim));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t len = a.cache_seqlens[b];
    if (len == 0) continue;
    for (int64_t i = 0; i < a.seq_len_q; ++i) {
      for (int64_t h = 0; h < a.num_heads_kv; ++h) {
        const int64_t dst = CacheOffset(a, b, len - a.seq_len_q + i, h);
        const int64_t src = ((b * a.seq_len_q + i) * a.num_heads_kv + h) * a.head_dim;
        AppendRow(a, a.k, src, a.k_cache, dst, HeadScale(a.k_scale, h), row);
        AppendRow(a, a.v, src, a.v_cache, dst, HeadScale(a.v_scale, h), row);
      }
    }
  }
}

absl::Status PagedAttentionCpu(const PagedAttentionArgs& a, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckPagedAttentionCpuConfig(config));
  const int64_t items = a.batch * a.num_heads_q;
  const int workers = CpuWorkerCount(RequestedThreads(config), items);
  const size_t d = static_cast<size_t>(a.head_dim);
  std::vector<std::vector<float>> rows(static_cast<size_t>(workers), std::vector<float>(d));
  std::vector<std::vector<double>> accs(static_cast<size_t>(workers), std::vector<double>(d));
  std::vector<std::vector<double>> logits(static_cast<size_t>(workers));
  return ParallelForInterruptible(items, workers, a.interrupt, [&](int worker, int64_t item) {
    const size_t w = static_cast<size_t>(worker);
    AttendHead(a, item / a.num_heads_q, item % a.num_heads_q, rows[w], accs[w], logits[w]);
  });
}

const ConfigSchema& PagedAttentionCpuConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{CpuThreadsField()}};
  return *kSchema;
}

absl::Status CheckPagedAttentionCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckCpuPlatform(config));
  return PagedAttentionCpuConfigSchema().Check(config, "paged_attention on cpu");
}

}  // namespace kernelserve::cpu
