// Device code of the flash attention backward kernels (flash_attention_bwd_device.cuh): the
// masks and probabilities of a pair, the query rows a key tile needs, the two matrix-product
// shapes on swizzled shared-memory tiles and the stores of an accumulator.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_COMMON_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda::flash {

template <typename T>
__device__ __forceinline__ float ToFloat(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

// 4 bytes from global to shared memory, or 4 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void CopyAsync4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// Under a causal mask or a right window, row i sees keys up to i + KeyReach (VisibleRange's
// hi before it is clipped to the sequence).
__device__ __forceinline__ int64_t KeyReach(const FlashDeviceArgs& p, const Span& s) {
  int64_t right = p.window_right >= 0 ? p.window_right : 0;
  if (p.causal) right = min(right, int64_t{0});
  return s.k_len - s.q_len + right;
}

// The query rows [lo, hi] (relative to the sequence) that may see a key of [j0, j1]: row i
// sees keys up to i + Sk - Sq (+ the right window) and from i + Sk - Sq - window_left. Empty
// when hi < lo. Segment ids are not looked at (the per-element mask handles them).
__device__ __forceinline__ void QueryRange(const FlashDeviceArgs& p, const Span& s, int64_t j0,
                                           int64_t j1, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = s.q_len - 1;
  if (p.causal || p.window_right >= 0) lo = max(lo, j0 - KeyReach(p, s));
  if (p.window_left >= 0) hi = min(hi, j1 - (s.k_len - s.q_len) + p.window_left);
}

// The last key tile (of block_k keys) whose QueryRange starts at or before row y: under a
// causal mask or a right window, the last one that a row of [0, y] sees; -1 when none does.
// REQUIRES: 0 <= y < s.q_len.
__device__ __forceinline__ int64_t LastKeyTileSeeing(const FlashDeviceArgs& p, const Span& s,
                                                     int64_t y, int block_k) {
  const int64_t last = (s.k_len + block_k - 1) / block_k - 1;
  if (!(p.causal || p.window_right >= 0)) return last;
  const int64_t reach = y + KeyReach(p, s);  // the last key row y sees
  return reach < 0 ? -1 : min(last, reach / block_k);
}

// True when every query row of [i0, i1] sees every key of [j0, j1].
__device__ __forceinline__ bool TileIsFull(const FlashDeviceArgs& p, const Span& s, int64_t i0,
                                           int64_t i1, int64_t j0, int64_t j1) {
  if (p.q_segment_ids != nullptr || i1 >= s.q_len || j1 >= s.k_len) return false;
  int64_t first_lo, first_hi, last_lo, last_hi;
  VisibleRange(p, s, i0, first_lo, first_hi);
  VisibleRange(p, s, i1, last_lo, last_hi);
  return first_hi >= j1 && last_lo <= j0;
}

// The sequence bounds and the causal / window mask of a sequence as bounds on the distance
// d = j - i - (Sk - Sq) of key j from query row i's diagonal: the pair is visible iff i < Sq,
// j < Sk and -left <= d <= right (VisibleRange's rule, inline and in 32 bits: sequences are
// shorter than 2^31).
struct PairMask {
  int q_len;
  int k_len;
  int offset;  // Sk - Sq
  int left;
  int right;

  __device__ __forceinline__ bool Visible(int i, int j) const {
    const int d = j - i - offset;
    return (i < q_len) & (j < k_len) & (d <= right) & (-d <= left);  // no branches
  }
};

__device__ __forceinline__ PairMask PairMaskOf(const FlashDeviceArgs& p, const Span& s) {
  constexpr int64_t kFar = int64_t{1} << 30;  // farther than any key
  PairMask m;
  m.q_len = static_cast<int>(s.q_len);
  m.k_len = static_cast<int>(s.k_len);
  m.offset = static_cast<int>(s.k_len - s.q_len);
  m.left = static_cast<int>(p.window_left >= 0 ? min(p.window_left, kFar) : kFar);
  int64_t right = p.window_right >= 0 ? min(p.window_right, kFar) : kFar;
  if (p.causal) right = min(right, int64_t{0});
  m.right = static_cast<int>(right);
  return m;
}

// P of query row i and key j (relative to the sequence) from raw = q_i.k_j and lse2 = lse_i *
// log2(e): 0 where the pair is masked, else exp(logits - lse) with the soft cap (tanhf, not
// the forward's approximation) and the bias. PairProbability is inline, MaskedProbability a
// call (for the mma.sync kernels' tiles at a mask's edge or with a bias or a cap: inlined
// into their unrolled tile loops it would cost registers).
__device__ __forceinline__ float PairProbability(const FlashDeviceArgs& p, const Span& s,
                                                 int64_t seq, int64_t head, int64_t i, int64_t j,
                                                 float raw, float lse2) {
  if (i >= s.q_len || j >= s.k_len) return 0.0f;
  int64_t lo, hi;
  VisibleRange(p, s, i, lo, hi);
  if (j < lo || j > hi) return 0.0f;
  if (p.q_segment_ids != nullptr) {
    const int64_t segment = p.q_segment_ids[seq * p.seq_len_q + i];
    if (!(segment > 0 && p.kv_segment_ids[seq * p.seq_len_k + j] == segment)) return 0.0f;
  }
  float x = raw * p.softmax_scale;
  // __fdividef: no slow-path call for the rare operands a division by the cap would need.
  if (p.softcap > 0.0f) x = p.softcap * tanhf(__fdividef(x, p.softcap));
  if (p.bias != nullptr) {
    x += p.bias[seq * p.bias_batch_stride + head * p.bias_head_stride + i * p.seq_len_k + j];
  }
  return Exp2(x * kLog2e - lse2);
}
static __device__ __noinline__ float MaskedProbability(const FlashDeviceArgs& p, const Span& s,
                                                       int64_t seq, int64_t head, int64_t i,
                                                       int64_t j, float raw, float lse2) {
  return PairProbability(p, s, seq, head, i, j, raw, lse2);
}

// The soft cap's derivative 1 - t^2 at a pair of probability `prob` > 0, t recovered from the
// logits: cap * t = ln(prob) + lse - bias. 0 where prob is 0 (dS is 0 there anyway).
// SoftcapDerivative is inline, SoftcapFactor a call.
__device__ __forceinline__ float SoftcapDerivative(const FlashDeviceArgs& p, int64_t seq,
                                                   int64_t head, int64_t i, int64_t j, float prob,
                                                   float lse2) {
  if (prob == 0.0f) return 0.0f;
  float capped = (log2f(prob) + lse2) * kLn2;
  if (p.bias != nullptr) {
    capped -= p.bias[seq * p.bias_batch_stride + head * p.bias_head_stride + i * p.seq_len_k + j];
  }
  const float t = __fdividef(capped, p.softcap);
  return 1.0f - t * t;
}
static __device__ __noinline__ float SoftcapFactor(const FlashDeviceArgs& p, int64_t seq,
                                                   int64_t head, int64_t i, int64_t j, float prob,
                                                   float lse2) {
  return SoftcapDerivative(p, seq, head, i, j, prob, lse2);
}

// c[16 rows x 8 kNTiles] = A B^T for the 16 rows of tile `sa` from row `a_row` and the first
// 8 kNTiles rows of tile `sb`, both [rows][kD] swizzled (the forward's S = Q K^T).
template <bool kBf16, int kD, int kNTiles, typename T>
__device__ __forceinline__ void RowProducts(float (&c)[kNTiles][4], const T* sa, int a_row,
                                            const T* sb, int lane) {
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[4];
    const int ar = a_row + (lane & 7) + ((lane >> 3) & 1) * 8;
    LoadMatrix4(a, SharedAddress(sa + Swizzle<kD>(ar, ks * 16 + (lane >> 4) * 8)));
#pragma unroll
    for (int nb = 0; nb < kNTiles / 2; ++nb) {
      uint32_t b[4];
      const int br = nb * 16 + (lane & 7) + (lane >> 4) * 8;
      LoadMatrix4(b, SharedAddress(sb + Swizzle<kD>(br, ks * 16 + ((lane >> 3) & 1) * 8)));
      Mma<kBf16>(c[2 * nb], a, b[0], b[1]);
      Mma<kBf16>(c[2 * nb + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x kD] += X B for X the warp's [16 x 8 kXTiles] tile in the accumulator layout
// (rounded to 16 bits) and B the first 8 kXTiles rows of tile `sb` ([rows][kD] swizzled; the
// forward's O += P V).
template <bool kBf16, int kD, int kXTiles, typename T>
__device__ __forceinline__ void AccumulateProducts(float (&acc)[kD / 8][4],
                                                   const float (&x)[kXTiles][4], const T* sb,
                                                   int lane) {
#pragma unroll
  for (int kk = 0; kk < kXTiles / 2; ++kk) {
    uint32_t a[4];
    ProbabilityFragment<kBf16>(x, kk, a);
#pragma unroll
    for (int db = 0; db < kD / 16; ++db) {
      uint32_t b[4];
      const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      LoadMatrix4Trans(b, SharedAddress(sb + Swizzle<kD>(r, db * 16 + (lane >> 4) * 8)));
      Mma<kBf16>(acc[2 * db], a, b[0], b[1]);
      Mma<kBf16>(acc[2 * db + 1], a, b[2], b[3]);
    }
  }
}

// Stores the warp's 16 rows [row0, row0 + 16) of an accumulator times `scale` to `dst` (rows
// `stride` elements apart); rows at or past `valid` are not stored.
template <typename T, bool kBf16, int kD>
__device__ __forceinline__ void StoreAccumulator(T* dst, int64_t stride, int64_t row0,
                                                 int64_t valid, const float (&acc)[kD / 8][4],
                                                 float scale, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + lane / 4 + 8 * r;
    if (row >= valid) continue;
    T* const out = dst + row * stride + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < kD / 8; ++d) {
      *reinterpret_cast<uint32_t*>(out + d * 8) =
          Pack<kBf16>(acc[d][2 * r] * scale, acc[d][2 * r + 1] * scale);
    }
  }
}

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_COMMON_CUH_
