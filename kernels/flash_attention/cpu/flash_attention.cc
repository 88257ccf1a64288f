#include "kernels/flash_attention/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"

namespace kernelserve::cpu {
namespace {

constexpr int64_t kDefaultBlockQ = 32;
constexpr int64_t kDefaultBlockK = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where one sequence lives in q and k.
struct Span {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  int64_t k_begin = 0;
  int64_t k_len = 0;
};

// One tile of query rows of one sequence; a work item is a tile and a head.
struct QueryTile {
  int64_t seq = 0;
  int64_t q_start = 0;  // first row, relative to the sequence
};

// Per-worker buffers.
struct Scratch {
  std::vector<float> q;     // [block_q, D]
  std::vector<float> k;     // [block_k, D]
  std::vector<float> v;     // [block_k, D]
  std::vector<float> s;     // [block_q, block_k] logits, then probabilities
  std::vector<float> o;     // [block_q, D] unnormalised output
  std::vector<float> m;     // [block_q] running max
  std::vector<float> l;     // [block_q] running sum
  std::vector<int64_t> lo;  // [block_q] first visible key per row
  std::vector<int64_t> hi;  // [block_q] last visible key per row
};

// Everything a work item needs.
struct Plan {
  const FlashAttentionArgs* args = nullptr;
  int64_t block_q = 0;
  int64_t block_k = 0;
  int64_t group = 1;  // Hq / Hkv
};

Span SpanOf(const FlashAttentionArgs& a, int64_t seq) {
  if (a.cu_seqlens_q != nullptr) {
    return {a.cu_seqlens_q[seq], a.cu_seqlens_q[seq + 1] - a.cu_seqlens_q[seq], a.cu_seqlens_k[seq],
            a.cu_seqlens_k[seq + 1] - a.cu_seqlens_k[seq]};
  }
  return {seq * a.seq_len_q, a.seq_len_q, seq * a.seq_len_k, a.seq_len_k};
}

absl::Status CheckArgs(const FlashAttentionArgs& a) {
  if (!IsFloating(a.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention: dtype ", Sv(DTypeName(a.dtype)), " is not f32, f16 or bf16"));
  }
  if (a.head_dim < 1 || a.num_heads_q < 1 || a.num_heads_kv < 1 ||
      a.num_heads_q % a.num_heads_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention: expected D >= 1 and Hq a multiple of Hkv, got D=", a.head_dim,
        " Hq=", a.num_heads_q, " Hkv=", a.num_heads_kv));
  }
  if (a.total_q < 0 || a.total_k < 0 || a.num_sequences < 0 || a.seq_len_q < 0 || a.seq_len_k < 0) {
    return absl::InvalidArgumentError("flash attention: negative size");
  }
  if ((a.cu_seqlens_q == nullptr) != (a.cu_seqlens_k == nullptr)) {
    return absl::InvalidArgumentError(
        "flash attention: cu_seqlens_q and cu_seqlens_k must be given together");
  }
  if (a.cu_seqlens_q != nullptr) {
    if (a.bias != nullptr || a.q_segment_ids != nullptr || a.kv_segment_ids != nullptr) {
      return absl::InvalidArgumentError(
          "flash attention: bias and segment ids need the dense form, not cu_seqlens");
    }
    KS_RETURN_IF_ERROR(CheckOffsets(a.cu_seqlens_q, a.num_sequences, a.total_q, "cu_seqlens_q"));
    KS_RETURN_IF_ERROR(CheckOffsets(a.cu_seqlens_k, a.num_sequences, a.total_k, "cu_seqlens_k"));
  } else if (a.num_sequences * a.seq_len_q > a.total_q ||
             a.num_sequences * a.seq_len_k > a.total_k) {
    return absl::InvalidArgumentError("flash attention: B*S exceeds the rows of q or k");
  }
  if ((a.q_segment_ids == nullptr) != (a.kv_segment_ids == nullptr)) {
    return absl::InvalidArgumentError(
        "flash attention: q_segment_ids and kv_segment_ids must be given together");
  }
  return absl::OkStatus();
}

// dst[r, :] = head `head` of rows [row, row + rows) of a [*, heads, D] tensor, as float.
void LoadHeadRows(const FlashAttentionArgs& a, const void* src, int64_t heads, int64_t head,
                  int64_t row, int64_t rows, float* dst) {
  const int64_t d = a.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    LoadAsFloat(a.dtype, src, ((row + r) * heads + head) * d, d, dst + r * d);
  }
}

// Fills s[r, c] with the logit of query row q_start + r and key j0 + c, or -inf when hidden.
void ComputeLogits(const Plan& plan, const Span& span, const QueryTile& tile, int64_t head,
                   int64_t rows, int64_t j0, int64_t cols, Scratch& w) {
  const FlashAttentionArgs& a = *plan.args;
  const int64_t d = a.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = tile.q_start + r;
    const float* q = w.q.data() + r * d;
    float* s = w.s.data() + r * plan.block_k;
    const float* bias = a.bias == nullptr ? nullptr
                                          : a.bias + tile.seq * a.bias_batch_stride +
                                                head * a.bias_head_stride + i * span.k_len;
    const int64_t q_seg =
        a.q_segment_ids == nullptr ? 0 : a.q_segment_ids[tile.seq * a.seq_len_q + i];
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t j = j0 + c;
      bool visible = j >= w.lo[r] && j <= w.hi[r];
      if (a.q_segment_ids != nullptr) {
        visible = visible && q_seg > 0 && a.kv_segment_ids[tile.seq * a.seq_len_k + j] == q_seg;
      }
      if (!visible) {
        s[c] = kNegInf;
        continue;
      }
      const float* k = w.k.data() + c * d;
      float dot = 0.0f;
      for (int64_t x = 0; x < d; ++x) dot += q[x] * k[x];
      float logit = a.softmax_scale * dot;
      if (a.softcap > 0.0f) logit = a.softcap * std::tanh(logit / a.softcap);
      if (bias != nullptr) logit += bias[j];
      s[c] = logit;
    }
  }
}

// Folds the logits of one key tile into the running max, sum and output of each row.
void OnlineSoftmaxUpdate(const Plan& plan, int64_t rows, int64_t cols, Scratch& w) {
  const int64_t d = plan.args->head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    float* s = w.s.data() + r * plan.block_k;
    const float tile_max = *std::max_element(s, s + cols);
    if (tile_max == kNegInf) continue;  // nothing visible in this tile
    const float m_new = std::max(w.m[r], tile_max);
    const float alpha = std::exp(w.m[r] - m_new);  // 0 while the row had nothing (m = -inf)
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      s[c] = std::exp(s[c] - m_new);  // hidden keys: exp(-inf) = 0
      sum += s[c];
    }
    w.l[r] = w.l[r] * alpha + sum;
    w.m[r] = m_new;
    float* o = w.o.data() + r * d;
    for (int64_t x = 0; x < d; ++x) o[x] *= alpha;
    for (int64_t c = 0; c < cols; ++c) {
      if (s[c] == 0.0f) continue;
      const float* v = w.v.data() + c * d;
      for (int64_t x = 0; x < d; ++x) o[x] += s[c] * v[x];
    }
  }
}

// Sets w.lo / w.hi to the visible key range of each row (hi < lo when none).
void VisibleRanges(const FlashAttentionArgs& a, const Span& span, int64_t q_start, int64_t rows,
                   Scratch& w) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t diagonal = q_start + r + span.k_len - span.q_len;
    int64_t lo = 0;
    int64_t hi = span.k_len - 1;
    if (a.causal) hi = std::min(hi, diagonal);
    if (a.window_right >= 0) hi = std::min(hi, diagonal + a.window_right);
    if (a.window_left >= 0) lo = std::max(lo, diagonal - a.window_left);
    w.lo[r] = lo;
    w.hi[r] = hi;
  }
}

// Writes out (and lse) for rows [q_start, q_start + rows) of the tile's sequence, head `head`.
void StoreRows(const FlashAttentionArgs& a, const Span& span, const QueryTile& tile, int64_t head,
               int64_t rows, Scratch& w) {
  const int64_t d = a.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    float* o = w.o.data() + r * d;
    const float l = w.l[r];
    if (l > 0.0f) {
      for (int64_t x = 0; x < d; ++x) o[x] /= l;
    } else {
      std::fill(o, o + d, 0.0f);
    }
    const int64_t row = span.q_begin + tile.q_start + r;
    StoreFromFloat(a.dtype, o, d, a.out, (row * a.num_heads_q + head) * d);
    if (a.lse == nullptr) continue;
    const float lse = l > 0.0f ? w.m[r] + std::log(l) : kNegInf;
    if (a.cu_seqlens_q != nullptr) {
      a.lse[head * a.total_q + row] = lse;
    } else {
      a.lse[(tile.seq * a.num_heads_q + head) * a.seq_len_q + tile.q_start + r] = lse;
    }
  }
}

void RunTile(const Plan& plan, const QueryTile& tile, int64_t head, Scratch& w) {
  const FlashAttentionArgs& a = *plan.args;
  const Span span = SpanOf(a, tile.seq);
  const int64_t rows = std::min(plan.block_q, span.q_len - tile.q_start);
  const int64_t kv_head = head / plan.group;
  LoadHeadRows(a, a.q, a.num_heads_q, head, span.q_begin + tile.q_start, rows, w.q.data());
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  std::fill(w.o.begin(), w.o.end(), 0.0f);
  VisibleRanges(a, span, tile.q_start, rows, w);
  // Both ends of the visible range grow with the row, so the tile sees keys between the first
  // row's lo and the last row's hi.
  const int64_t j_begin = std::max<int64_t>(w.lo[0], 0);
  const int64_t j_end = std::min(w.hi[rows - 1] + 1, span.k_len);
  for (int64_t j0 = j_begin; j0 < j_end; j0 += plan.block_k) {
    const int64_t cols = std::min(plan.block_k, j_end - j0);
    LoadHeadRows(a, a.k, a.num_heads_kv, kv_head, span.k_begin + j0, cols, w.k.data());
    LoadHeadRows(a, a.v, a.num_heads_kv, kv_head, span.k_begin + j0, cols, w.v.data());
    ComputeLogits(plan, span, tile, head, rows, j0, cols, w);
    OnlineSoftmaxUpdate(plan, rows, cols, w);
  }
  StoreRows(a, span, tile, head, rows, w);
}

// Zeroes the q rows no sequence covers (varlen offsets may end before total_q).
void ClearUncoveredRows(const FlashAttentionArgs& a) {
  const int64_t covered =
      a.cu_seqlens_q != nullptr ? a.cu_seqlens_q[a.num_sequences] : a.num_sequences * a.seq_len_q;
  const int64_t width = a.num_heads_q * a.head_dim;
  const std::vector<float> zeros(static_cast<size_t>(width), 0.0f);
  for (int64_t row = covered; row < a.total_q; ++row) {
    StoreFromFloat(a.dtype, zeros.data(), width, a.out, row * width);
    if (a.lse == nullptr || a.cu_seqlens_q == nullptr) continue;
    for (int64_t h = 0; h < a.num_heads_q; ++h) a.lse[h * a.total_q + row] = kNegInf;
  }
}

}  // namespace

absl::Status FlashAttentionCpu(const FlashAttentionArgs& args, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckFlashAttentionCpuConfig(config));
  KS_RETURN_IF_ERROR(CheckArgs(args));
  // No query row: nothing to write. An empty q still declares its B (q [10^9,0,1,1] carries no
  // bytes), so nothing is walked or sized from it.
  if (args.total_q == 0) return absl::OkStatus();
  Plan plan;
  plan.args = &args;
  // Tiles larger than the problem cover it in one; clamping keeps scratch within its size.
  plan.block_q = std::clamp<int64_t>(config.block_q > 0 ? config.block_q : kDefaultBlockQ, 1,
                                     std::max<int64_t>(args.total_q, 1));
  plan.block_k = std::clamp<int64_t>(config.block_k > 0 ? config.block_k : kDefaultBlockK, 1,
                                     std::max<int64_t>(args.total_k, 1));
  plan.group = args.num_heads_q / args.num_heads_kv;

  std::vector<QueryTile> tiles;
  for (int64_t seq = 0; seq < args.num_sequences; ++seq) {
    const Span span = SpanOf(args, seq);
    for (int64_t start = 0; start < span.q_len; start += plan.block_q) {
      tiles.push_back({seq, start});
    }
  }
  ClearUncoveredRows(args);

  const int threads = CpuWorkerCount(RequestedThreads(config),
                                     static_cast<int64_t>(tiles.size()) * args.num_heads_q);
  const auto bq = static_cast<size_t>(plan.block_q);
  const auto bk = static_cast<size_t>(plan.block_k);
  const auto d = static_cast<size_t>(args.head_dim);
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  for (Scratch& w : scratch) {
    w.q.resize(bq * d);
    w.k.resize(bk * d);
    w.v.resize(bk * d);
    w.s.resize(bq * bk);
    w.o.resize(bq * d);
    w.m.resize(bq);
    w.l.resize(bq);
    w.lo.resize(bq);
    w.hi.resize(bq);
  }
  const int64_t heads = args.num_heads_q;
  return ParallelForInterruptible(static_cast<int64_t>(tiles.size()) * heads, threads,
                                  args.interrupt, [&](int worker, int64_t i) {
                                    RunTile(plan, tiles[static_cast<size_t>(i / heads)], i % heads,
                                            scratch[static_cast<size_t>(worker)]);
                                  });
}

const ConfigSchema& FlashAttentionCpuConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("block_q", 0, kMaxCpuAttentionTile, "0: the kernel's tile",
                     "query rows per tile"),
      IntConfigField("block_k", 0, kMaxCpuAttentionTile, "0: the kernel's tile",
                     "key rows per tile"),
      CpuThreadsField(),
  }};
  return *kSchema;
}

absl::Status CheckFlashAttentionCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckCpuPlatform(config));
  return FlashAttentionCpuConfigSchema().Check(config, "flash_attention on cpu");
}

}  // namespace kernelserve::cpu
