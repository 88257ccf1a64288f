// Device code both flash attention forward kernels share (the mma.sync one of
// flash_attention_device.cuh and the Hopper wgmma one of flash_attention_wgmma.cuh): copies,
// sequence spans, visible key ranges, the mask, the online softmax and the epilogue.
//
// Both kernels hold a warp's S = Q K^T tile and its O accumulator in the same register layout:
// n8 tiles of [16 rows x 8 columns], tile n's four values in thread (g = lane / 4, t = lane % 4)
// being (row g, col 8n + 2t), (g, 8n + 2t + 1), (g + 8, 8n + 2t), (g + 8, 8n + 2t + 1). So a
// thread owns two query rows (g and g + 8 of its warp's 16) and the softmax needs only the
// four threads of a row (shuffles across t).
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_COMMON_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda::flash {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float TanhApprox(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t SharedAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Starts copying a tile of kRows rows of kD values (row r from src + r * stride) into shared
// memory at `tile` + offset(r, c) bytes (c: the first column of a 16-byte chunk); rows at or
// past `valid` are zero-filled. Each row has kSlots chunk slots (kD / 8, or more when the tile
// is wider than kD; slots past kD are not written). When the block's threads cover whole rows
// (kThreads a multiple of kSlots), thread i always takes slot i % kSlots of rows
// i / kSlots + k * kRowStep, so its addresses advance by constants; otherwise (D = 96 on
// mma.sync) it strides through the chunks.
template <typename T, int kD, int kRows, int kThreads, int kSlots = kD / 8, typename Offset>
__device__ __forceinline__ void LoadRows(uint32_t tile, const T* src, int64_t stride, int64_t valid,
                                         Offset offset) {
  constexpr int kChunks = kD / 8;
  static_assert(kSlots >= kChunks, "a slot for every chunk");
  const int valid_rows = static_cast<int>(min(valid, int64_t{kRows}));
  if constexpr (kThreads % kSlots == 0 && kRows % (kThreads / kSlots) == 0) {
    constexpr int kRowStep = kThreads / kSlots;
    const int r0 = static_cast<int>(threadIdx.x) / kSlots;
    const int c = (static_cast<int>(threadIdx.x) % kSlots) * 8;
    if (kSlots > kChunks && c >= kD) return;  // a padding slot
    const T* from = src + r0 * stride + c;
#pragma unroll
    for (int k = 0; k < kRows / kRowStep; ++k) {
      const int r = r0 + k * kRowStep;
      const bool ok = r < valid_rows;
      CopyAsync16(tile + offset(r, c), ok ? from : src, ok);
      from += kRowStep * stride;
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < kRows * kChunks; i += kThreads) {
      const int r = i / kChunks;
      const int c = (i % kChunks) * 8;
      const bool ok = r < valid_rows;
      CopyAsync16(tile + offset(r, c), ok ? src + r * stride + c : src, ok);
    }
  }
}

// Two floats as a pair of 16-bit values (lo in the low half).
template <bool kBf16>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Where one sequence lives.
struct Span {
  int64_t q_begin;
  int64_t q_len;
  int64_t k_begin;
  int64_t k_len;
};

__device__ __forceinline__ Span SpanOf(const FlashDeviceArgs& p, int64_t seq) {
  if (p.cu_seqlens_q != nullptr) {
    const int64_t q0 = p.cu_seqlens_q[seq];
    const int64_t k0 = p.cu_seqlens_k[seq];
    return {q0, p.cu_seqlens_q[seq + 1] - q0, k0, p.cu_seqlens_k[seq + 1] - k0};
  }
  return {seq * p.seq_len_q, p.seq_len_q, seq * p.seq_len_k, p.seq_len_k};
}

// Where (seq, head, row) is in lse's layout: dense [N, Hq, Sq], varlen [Hq, Tq].
__device__ __forceinline__ int64_t LseIndex(const FlashDeviceArgs& p, const Span& s, int64_t seq,
                                            int64_t head, int64_t row) {
  return p.cu_seqlens_q != nullptr ? head * p.total_q + s.q_begin + row
                                   : (seq * p.num_heads_q + head) * p.seq_len_q + row;
}

// The visible key range [lo, hi] of query row `row` (relative to its sequence).
__device__ __forceinline__ void VisibleRange(const FlashDeviceArgs& p, const Span& s, int64_t row,
                                             int64_t& lo, int64_t& hi) {
  const int64_t diagonal = row + s.k_len - s.q_len;
  lo = p.window_left >= 0 ? diagonal - p.window_left : 0;
  hi = s.k_len - 1;
  if (p.causal) hi = min(hi, diagonal);
  if (p.window_right >= 0) hi = min(hi, diagonal + p.window_right);
}

// What a block works on: its sequence, head and first query row (the grid runs the last query
// tiles first: under a causal mask they see the most keys), and where that head's Q, K and V
// rows of the sequence start.
template <typename T>
struct BlockInputs {
  int64_t seq;
  int64_t head;
  int64_t q_start;
  Span span;
  int64_t q_stride;   // elements between rows of q and out
  int64_t kv_stride;  // elements between rows of k and v
  const T* q;
  const T* k;
  const T* v;
};

template <typename T, int kD>
__device__ __forceinline__ BlockInputs<T> BlockInputsOf(const FlashDeviceArgs& p, int block_q) {
  BlockInputs<T> b;
  b.seq = blockIdx.z;
  b.head = blockIdx.y;
  b.q_start = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * block_q;
  b.span = SpanOf(p, b.seq);
  const int64_t kv_head = b.head / (p.num_heads_q / p.num_heads_kv);
  b.q_stride = p.num_heads_q * kD;
  b.kv_stride = p.num_heads_kv * kD;
  b.q = static_cast<const T*>(p.q) + b.span.q_begin * b.q_stride + b.head * kD;
  b.k = static_cast<const T*>(p.k) + b.span.k_begin * b.kv_stride + kv_head * kD;
  b.v = static_cast<const T*>(p.v) + b.span.k_begin * b.kv_stride + kv_head * kD;
  return b;
}

// The key tiles a block of query rows [q_start, q_start + block_q) needs: from the first row's
// lo to the last row's hi. Tiles wholly inside [last_lo, first_hi] need no per-element mask.
struct KeyTiles {
  int64_t tile_begin;  // first key tile (index in units of block_k)
  int num_tiles;       // 0 when no row of the block sees a key
  int64_t first_hi;    // hi of the block's first row
  int64_t last_lo;     // lo of the block's last row
};

__device__ __forceinline__ KeyTiles KeyTilesOf(const FlashDeviceArgs& p, const Span& span,
                                               int64_t q_start, int block_q, int block_k) {
  const int64_t last_row = min(q_start + block_q, span.q_len) - 1;
  int64_t first_lo, first_hi, last_lo, last_hi;
  VisibleRange(p, span, q_start, first_lo, first_hi);
  VisibleRange(p, span, last_row, last_lo, last_hi);
  const int64_t j_lo = max(first_lo, int64_t{0});
  KeyTiles tiles;
  tiles.tile_begin = j_lo / block_k;
  tiles.num_tiles =
      last_hi >= j_lo ? static_cast<int>(last_hi / block_k - tiles.tile_begin + 1) : 0;
  tiles.first_hi = first_hi;
  tiles.last_lo = last_lo;
  return tiles;
}

// A thread's two query rows: g and g + 8 of its warp's 16, relative to the sequence (they may
// be >= q_len; such rows are computed on a clamped row and never stored). Their visible
// ranges, segment ids and bias rows are looked up only for tiles that need them, so that the
// registers stay free for S and O.
struct ThreadRows {
  int64_t row[2];
};

__device__ __forceinline__ ThreadRows ThreadRowsOf(int64_t warp_row, int lane) {
  return {{warp_row + lane / 4, warp_row + lane / 4 + 8}};
}

// The one positive segment id that all 16 query rows of the calling warp carry (each
// thread's two, clamped into the sequence), or 0 when they do not share one. The same value in
// every lane. REQUIRES: segment ids set; every lane of the warp calls it.
__device__ __forceinline__ int64_t WarpSegment(const FlashDeviceArgs& p, const Span& span,
                                               int64_t seq, const ThreadRows& rows) {
  const int64_t* q_seg = p.q_segment_ids + seq * p.seq_len_q;
  const int64_t mine[2] = {q_seg[min(rows.row[0], span.q_len - 1)],
                           q_seg[min(rows.row[1], span.q_len - 1)]};
  const int64_t id = __shfl_sync(0xffffffffu, mine[0], 0);
  return __all_sync(0xffffffffu, id > 0 && mine[0] == id && mine[1] == id) ? id : 0;
}

// Whether the calling warp's rows share segment `id` (> 0) with every key of a tile, given
// the lane's share of the tile's key segment ids (key lane + 32 k in ids[k]): such a tile,
// inside every row's visible range, needs no segment mask. The warp's vote.
template <int kKeys>
__device__ __forceinline__ bool KeysInSegment(const int64_t (&ids)[kKeys / 32], int64_t id) {
  bool same = id > 0;
#pragma unroll
  for (int k = 0; k < kKeys / 32; ++k) same = same && ids[k] == id;
  return __all_sync(0xffffffffu, same);
}

// WarpSegment and KeysInSegment of keys [j0, j0 + kKeys) in one call.
// REQUIRES: segment ids set; those keys inside the sequence; every lane calls it.
template <int kKeys>
__device__ __forceinline__ bool SegmentsUniform(const FlashDeviceArgs& p, const Span& span,
                                                int64_t seq, const ThreadRows& rows, int64_t j0,
                                                int lane) {
  static_assert(kKeys % 32 == 0, "whole warps of keys");
  const int64_t id = WarpSegment(p, span, seq, rows);
  const int64_t* kv_seg = p.kv_segment_ids + seq * p.seq_len_k + j0;
  int64_t ids[kKeys / 32];
#pragma unroll
  for (int k = 0; k < kKeys / 32; ++k) ids[k] = id > 0 ? kv_seg[lane + 32 * k] : 0;
  return KeysInSegment<kKeys>(ids, id);
}

// Scales a tile of logits into log2 units (soft cap first when on) and sets keys the thread's
// rows cannot see to -inf. `j0` is the tile's first key; `full` says no key of it is masked.
// The common case (full tile, no bias) costs one multiply an element: the masks work on key
// offsets inside the tile (32-bit) and run only for tiles that need them.
// With !global_bias the bias is left to the caller (the warp-specialized kernel adds it from
// a shared-memory tile: AddBiasTile).
template <int kSTiles>
__device__ __forceinline__ void MaskLogits(float (&s)[kSTiles][4], const FlashDeviceArgs& p,
                                           const Span& span, int64_t seq, int64_t head,
                                           const ThreadRows& rows, int64_t j0, bool full, int t,
                                           bool global_bias = true) {
  const bool add_bias = global_bias && p.bias != nullptr;
  if (p.softcap > 0.0f) {
    const float cap_in = p.softmax_scale / p.softcap;
    const float cap_out = p.softcap * kLog2e;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = cap_out * TanhApprox(s[n][e] * cap_in);
    }
  } else {
    const float scale_log2 = p.softmax_scale * kLog2e;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= scale_log2;
    }
  }
  if (full && !add_bias) return;
  constexpr int kKeys = kSTiles * 8;
  int64_t safe_row[2];
  for (int r = 0; r < 2; ++r) safe_row[r] = min(rows.row[r], span.q_len - 1);
  if (!full) {
    // Visible offsets [lo, hi] of each row inside this tile, clamped to [-1, kKeys].
    int lo[2], hi[2];
    for (int r = 0; r < 2; ++r) {
      int64_t row_lo, row_hi;
      VisibleRange(p, span, safe_row[r], row_lo, row_hi);
      lo[r] = static_cast<int>(max(min(row_lo - j0, int64_t{kKeys}), int64_t{-1}));
      hi[r] = static_cast<int>(max(min(row_hi - j0, int64_t{kKeys}), int64_t{-1}));
    }
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jj = n * 8 + 2 * t + (e & 1);
        if (jj < lo[e >> 1] || jj > hi[e >> 1]) s[n][e] = -INFINITY;
      }
    }
    if (p.q_segment_ids != nullptr) {
      const int64_t q_seg[2] = {p.q_segment_ids[seq * p.seq_len_q + safe_row[0]],
                                p.q_segment_ids[seq * p.seq_len_q + safe_row[1]]};
      const int64_t* kv_seg = p.kv_segment_ids + seq * p.seq_len_k + j0;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const int jj = n * 8 + 2 * t + (e & 1);
          // Only keys inside the row's range are read (they exist).
          if (s[n][e] != -INFINITY && !(q_seg[r] > 0 && kv_seg[jj] == q_seg[r])) {
            s[n][e] = -INFINITY;
          }
        }
      }
    }
  }
  if (add_bias) {
    const float* bias[2];
    for (int r = 0; r < 2; ++r) {
      bias[r] = p.bias + seq * p.bias_batch_stride + head * p.bias_head_stride +
                safe_row[r] * span.k_len + j0;
    }
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jj = n * 8 + 2 * t + (e & 1);
        if (s[n][e] != -INFINITY) s[n][e] += bias[e >> 1][jj] * kLog2e;
      }
    }
  }
}

// Starts moving the bias of the thread's two rows for keys [j0, j0 + kKeys) into L1 (the
// four threads of a row take one 128-byte line each of every 512 bytes), so that MaskLogits,
// run once S has landed, finds it there. Lines past the sequence's keys are left alone.
// REQUIRES: a bias.
template <int kKeys>
__device__ __forceinline__ void PrefetchBias(const FlashDeviceArgs& p, const Span& span,
                                             int64_t seq, int64_t head, const ThreadRows& rows,
                                             int64_t j0, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float* row = p.bias + seq * p.bias_batch_stride + head * p.bias_head_stride +
                       min(rows.row[r], span.q_len - 1) * span.k_len + j0;
#pragma unroll
    for (int line = t; line < kKeys / 32; line += 4) {
      if (j0 + line * 32 < span.k_len) {
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(row + line * 32));
      }
    }
  }
}

// The largest value of the thread's row r (0: g, 1: g + 8) in a tile, over the four threads
// that hold the row.
template <int kSTiles>
__device__ __forceinline__ float RowMax(const float (&s)[kSTiles][4], int r) {
  float tile_max = -INFINITY;
#pragma unroll
  for (int n = 0; n < kSTiles; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  return fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
}

// Adds the bias (log2 units) to the logits a thread holds of a tile, where they are not
// masked, reading it from a shared-memory tile of the warpgroup's 64 rows: f32, columns in
// blocks of 32 (64 rows x 128 bytes each), 16-byte chunk c of row r at c ^ (r % 8) (the
// tensor memory accelerator's 128-byte swizzle). `warp_row` is the warp's first row (16 w).
// A warp's float2 reads of one n8 tile fall in 32 distinct banks.
template <int kSTiles>
__device__ __forceinline__ void AddBiasTile(float (&s)[kSTiles][4], uint32_t tile, int warp_row,
                                            int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t row = tile + static_cast<uint32_t>(warp_row + g + 8 * r) * 128;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
      const int col = n * 8 + 2 * t;
      const int chunk = (col % 32) / 4;
      const uint32_t at = row + (col / 32) * 64 * 128 + ((chunk ^ g) * 16) + (col % 4) * 4;
      float b0, b1;
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(b0), "=f"(b1) : "r"(at));
      if (s[n][2 * r] != -INFINITY) s[n][2 * r] += b0 * kLog2e;
      if (s[n][2 * r + 1] != -INFINITY) s[n][2 * r + 1] += b1 * kLog2e;
    }
  }
}

// One step of the online softmax without touching O: new row maxima m, l rescaled and the
// tile's sums added (per thread; the four threads of a row sum their l at the end), s turned
// into probabilities exp2(s - m_new). Returns in alpha the factor exp2(m_old - m_new) that O
// must be multiplied by.
template <int kSTiles>
__device__ __forceinline__ void SoftmaxProbabilities(float (&s)[kSTiles][4], float (&m)[2],
                                                     float (&l)[2], float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float tile_max = RowMax(s, r);
    const float m_new = fmaxf(m[r], tile_max);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = Exp2(m[r] - m_use);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
      s[n][2 * r] = Exp2(s[n][2 * r] - m_use);
      s[n][2 * r + 1] = Exp2(s[n][2 * r + 1] - m_use);
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
  }
}

// SoftmaxProbabilities of raw logits s = q.k of a tile with no mask, bias or soft cap, the
// scale (log2 units) folded into the exponent: exp2(s * scale_log2 - m) is one fused
// multiply-add an element where MaskLogits' scaling and the subtraction are two.
// REQUIRES: scale_log2 > 0 (the row maximum of the scaled logits is the scaled maximum).
template <int kSTiles>
__device__ __forceinline__ void ScaledSoftmaxProbabilities(float (&s)[kSTiles][4], float scale_log2,
                                                           float (&m)[2], float (&l)[2],
                                                           float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float tile_max = RowMax(s, r);
    const float m_new = fmaxf(m[r], tile_max * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = Exp2(m[r] - m_use);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
      s[n][2 * r] = Exp2(fmaf(s[n][2 * r], scale_log2, -m_use));
      s[n][2 * r + 1] = Exp2(fmaf(s[n][2 * r + 1], scale_log2, -m_use));
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
  }
}

// Multiplies the thread's two rows of O by their alpha.
template <int kOTiles>
__device__ __forceinline__ void RescaleRows(float (&o)[kOTiles][4], const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) {
    o[d][0] *= alpha[0];
    o[d][1] *= alpha[0];
    o[d][2] *= alpha[1];
    o[d][3] *= alpha[1];
  }
}

// One step of the online softmax: SoftmaxProbabilities, then O rescaled.
template <int kSTiles, int kOTiles>
__device__ __forceinline__ void OnlineSoftmax(float (&s)[kSTiles][4], float (&o)[kOTiles][4],
                                              float (&m)[2], float (&l)[2]) {
  float alpha[2];
  SoftmaxProbabilities(s, m, l, alpha);
  RescaleRows(o, alpha);
}

// The A operand (16 rows x 16 keys, 16-bit) of P V for keys [16 kk, 16 kk + 16) of a tile of
// probabilities in the accumulator layout.
template <bool kBf16, int kSTiles>
__device__ __forceinline__ void ProbabilityFragment(const float (&s)[kSTiles][4], int kk,
                                                    uint32_t (&a)[4]) {
  a[0] = Pack<kBf16>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = Pack<kBf16>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = Pack<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = Pack<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Normalises o by the row sums and stores the thread's rows of out (and lse when asked); rows
// that saw no key give zeros and lse -inf; rows past the sequence are not stored.
template <typename T, bool kBf16, int kD>
__device__ __forceinline__ void StoreRows(const FlashDeviceArgs& p, const Span& span, int64_t seq,
                                          int64_t head, const ThreadRows& rows,
                                          const float (&o)[kD / 8][4], const float (&m)[2],
                                          const float (&l)[2], int t) {
  const int64_t q_stride = p.num_heads_q * kD;
  T* const out_ptr = static_cast<T*>(p.out) + span.q_begin * q_stride + head * kD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows.row[r] >= span.q_len) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* const dst = out_ptr + rows.row[r] * q_stride + 2 * t;
#pragma unroll
    for (int d = 0; d < kD / 8; ++d) {
      *reinterpret_cast<uint32_t*>(dst + d * 8) =
          Pack<kBf16>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && t == 0) {
      const float lse = sum > 0.0f ? (m[r] + __log2f(sum)) * kLn2 : -INFINITY;
      p.lse[LseIndex(p, span, seq, head, rows.row[r])] = lse;
    }
  }
}

// Checks what both launchers need of the arguments; cudaSuccess when they are usable.
inline cudaError_t CheckFlashArgs(const FlashDeviceArgs& args) {
  if (args.num_heads_q < 1 || args.num_heads_kv < 1 || args.num_heads_q % args.num_heads_kv != 0 ||
      args.num_sequences < 0) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// The grid of a launch with `block_q` query rows per block: query tiles x Hq x sequences, or
// x == 0 when there is nothing to do. cudaErrorInvalidConfiguration when it is too large.
inline cudaError_t FlashGrid(const FlashDeviceArgs& args, int block_q, dim3& grid) {
  const int64_t longest = args.cu_seqlens_q != nullptr ? args.max_seq_len_q : args.seq_len_q;
  const int64_t q_tiles = (longest + block_q - 1) / block_q;
  grid = dim3(0, 1, 1);
  if (q_tiles == 0 || args.num_sequences == 0) return cudaSuccess;
  if (q_tiles > 2147483647 || args.num_heads_q > 65535 || args.num_sequences > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  grid = dim3(static_cast<unsigned>(q_tiles), static_cast<unsigned>(args.num_heads_q),
              static_cast<unsigned>(args.num_sequences));
  return cudaSuccess;
}

// Launches `kernel` (either flash kernel) over the grid of FlashGrid with `threads` threads and
// `shared` bytes of dynamic shared memory a block; returns the launch's error.
template <typename Kernel>
cudaError_t LaunchFlashKernel(Kernel* kernel, const FlashDeviceArgs& args, int block_q, int threads,
                              size_t shared, cudaStream_t stream) {
  cudaError_t error = CheckFlashArgs(args);
  if (error != cudaSuccess) return error;
  dim3 grid;
  error = FlashGrid(args, block_q, grid);
  if (error != cudaSuccess || grid.x == 0) return error;
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (error != cudaSuccess) return error;
  kernel<<<grid, threads, shared, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_COMMON_CUH_
