// The flash attention backward kernels for any sm_80+ GPU (mma.sync), included by the
// per-head-dim .cu files. FlashAttention-2's scheme, deterministic:
//
//   1. FlashBwdDotKernel: D_i = rowsum(dout_i * out_i) per query row and head (fp32).
//   2. FlashBwdDkvKernel: one block per key tile of one kv head; each warp owns 16 key rows
//      with their dK and dV accumulators, and the block streams the query tiles (of every
//      query head of the group) that can see its keys: S^T = K Q^T, P^T = exp(logits - lse),
//      dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q.
//   3. FlashBwdDqKernel: one block per query tile of one head; each warp owns 16 query rows
//      and their dQ accumulator, and the block streams the visible key tiles: S, P and dP
//      again, dQ += dS K.
//
// No sum crosses blocks (dQ is not accumulated by atomics), so the same inputs give the same
// bits. Tiles are [rows][D] in shared memory, swizzled as the forward's; the two tiles a
// kernel streams are double-buffered by cp.async. Tiles that every pair sees skip the
// per-element mask.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DEVICE_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_bwd_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_dbias.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_device.cuh"

namespace kernelserve::cuda::flash {

template <typename T, int kD>
__global__ void __launch_bounds__(256) FlashBwdDotKernel(const FlashBwdDeviceArgs a) {
  const FlashDeviceArgs& p = a.fwd;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;  // row * Hq + h
  const int lane = threadIdx.x % 32;
  if (item >= p.total_q * p.num_heads_q) return;
  const T* const o = static_cast<const T*>(p.out) + item * kD;
  const T* const g = static_cast<const T*>(a.dout) + item * kD;
  float sum = 0.0f;
#pragma unroll
  for (int x = lane; x < kD; x += 32) sum += ToFloat(o[x]) * ToFloat(g[x]);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane != 0) return;
  const int64_t row = item / p.num_heads_q;
  const int64_t head = item % p.num_heads_q;
  a.dsum[p.cu_seqlens_q != nullptr ? head * p.total_q + row
                                   : ((row / p.seq_len_q) * p.num_heads_q + head) * p.seq_len_q +
                                         row % p.seq_len_q] = sum;
}

template <typename T, int kD, int kBlockQ, int kBlockK>
__global__ void __launch_bounds__(kBlockK * 2) FlashBwdDkvKernel(const FlashBwdDeviceArgs a) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = kBlockK * 2;  // a warp per 16 keys
  constexpr int kSTiles = kBlockQ / 8;   // n8 tiles of S^T (query columns)
  static_assert(kBlockK % 16 == 0 && kBlockQ % 16 == 0 && kD % 32 == 0, "tile shapes");
  const FlashDeviceArgs& p = a.fwd;

  extern __shared__ __align__(128) unsigned char smem[];
  T* const sk = reinterpret_cast<T*>(smem);
  T* const sv = sk + kBlockK * kD;
  T* const sq = sv + kBlockK * kD;                                       // two stages
  T* const sdo = sq + 2 * kBlockQ * kD;                                  // two stages
  float* const slse = reinterpret_cast<float*>(sdo + 2 * kBlockQ * kD);  // two stages
  float* const sdsum = slse + 2 * kBlockQ;                               // two stages

  const int64_t seq = blockIdx.z;
  const int64_t kv_head = blockIdx.y;
  const Span span = SpanOf(p, seq);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBlockK;
  if (j0 >= span.k_len) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t group = p.num_heads_q / p.num_heads_kv;
  const int64_t q_stride = p.num_heads_q * kD;
  const int64_t kv_stride = p.num_heads_kv * kD;
  const int64_t kv_offset = (span.k_begin + j0) * kv_stride + kv_head * kD;

  int64_t i_lo, i_hi;
  QueryRange(p, span, j0, min(j0 + kBlockK, span.k_len) - 1, i_lo, i_hi);
  const int64_t tile0 = i_lo / kBlockQ;
  const int q_tiles = i_hi >= i_lo ? static_cast<int>(i_hi / kBlockQ - tile0 + 1) : 0;
  const int items = q_tiles * static_cast<int>(group);  // (head of the group, query tile)

  LoadTile<T, kD, kBlockK, kThreads>(sk, static_cast<const T*>(p.k) + kv_offset, kv_stride,
                                     span.k_len - j0);
  LoadTile<T, kD, kBlockK, kThreads>(sv, static_cast<const T*>(p.v) + kv_offset, kv_stride,
                                     span.k_len - j0);
  auto load_item = [&](int item, int stage) {
    const int64_t head = kv_head * group + item / q_tiles;
    const int64_t i0 = (tile0 + item % q_tiles) * kBlockQ;
    const int64_t offset = (span.q_begin + i0) * q_stride + head * kD;
    LoadTile<T, kD, kBlockQ, kThreads>(
        sq + stage * kBlockQ * kD, static_cast<const T*>(p.q) + offset, q_stride, span.q_len - i0);
    LoadTile<T, kD, kBlockQ, kThreads>(sdo + stage * kBlockQ * kD,
                                       static_cast<const T*>(a.dout) + offset, q_stride,
                                       span.q_len - i0);
    // lse and D of rows past the sequence are 0: only the masked path sees them, which gives
    // such rows P = 0.
    for (int x = threadIdx.x; x < kBlockQ; x += kThreads) {
      const bool ok = i0 + x < span.q_len;
      const int64_t index = LseIndex(p, span, seq, head, ok ? i0 + x : 0);
      CopyAsync4(SharedAddress(slse + stage * kBlockQ + x), p.lse + index, ok);
      CopyAsync4(SharedAddress(sdsum + stage * kBlockQ + x), a.dsum + index, ok);
    }
  };
  if (items > 0) load_item(0, 0);
  CommitCopies();

  float dk[kD / 8][4], dv[kD / 8][4];
#pragma unroll
  for (int d = 0; d < kD / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;
  }
  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool plain = p.bias == nullptr && p.softcap <= 0.0f;
  const int t = lane % 4;
  for (int it = 0; it < items; ++it) {
    WaitCopies<0>();
    __syncthreads();
    if (it + 1 < items) load_item(it + 1, (it + 1) % 2);
    CommitCopies();
    const int stage = it % 2;
    const T* const tq = sq + stage * kBlockQ * kD;
    const T* const tdo = sdo + stage * kBlockQ * kD;
    const float* const lse = slse + stage * kBlockQ;
    const float* const dsum = sdsum + stage * kBlockQ;
    const int64_t head = kv_head * group + it / q_tiles;
    const int64_t i0 = (tile0 + it % q_tiles) * kBlockQ;

    // P^T for the warp's keys (rows) and the tile's queries (columns).
    float s[kSTiles][4];
    RowProducts<kBf16, kD>(s, sk, warp * 16, tq, lane);
    const bool full = plain && TileIsFull(p, span, i0, i0 + kBlockQ - 1, j0, j0 + kBlockK - 1);
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * t + (e & 1);
        const int64_t j = j0 + warp * 16 + lane / 4 + 8 * (e >> 1);
        const float lse2 = lse[col] * kLog2e;
        s[n][e] = full ? Exp2(s[n][e] * scale_log2 - lse2)
                       : MaskedProbability(p, span, seq, head, i0 + col, j, s[n][e], lse2);
      }
    }
    AccumulateProducts<kBf16, kD>(dv, s, tdo, lane);  // dV += P^T dO

    // dS^T = P^T (dP^T - D), dP^T = V dO^T; then dK += dS^T Q.
    float ds[kSTiles][4];
    RowProducts<kBf16, kD>(ds, sv, warp * 16, tdo, lane);
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * t + (e & 1);
        ds[n][e] = s[n][e] * (ds[n][e] - dsum[col]);
        if (p.softcap > 0.0f) {
          const int64_t j = j0 + warp * 16 + lane / 4 + 8 * (e >> 1);
          ds[n][e] *= SoftcapFactor(p, seq, head, i0 + col, j, s[n][e], lse[col] * kLog2e);
        }
      }
    }
    AccumulateProducts<kBf16, kD>(dk, ds, tq, lane);
  }
  WaitCopies<0>();
  const int64_t row0 = j0 + warp * 16;
  T* const dk_out = static_cast<T*>(a.dk) + span.k_begin * kv_stride + kv_head * kD;
  T* const dv_out = static_cast<T*>(a.dv) + span.k_begin * kv_stride + kv_head * kD;
  StoreAccumulator<T, kBf16, kD>(dk_out, kv_stride, row0, span.k_len, dk, p.softmax_scale, lane);
  StoreAccumulator<T, kBf16, kD>(dv_out, kv_stride, row0, span.k_len, dv, 1.0f, lane);
}

template <typename T, int kD, int kBlockQ, int kBlockK>
__global__ void __launch_bounds__(kBlockQ * 2) FlashBwdDqKernel(const FlashBwdDeviceArgs a) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = kBlockQ * 2;  // a warp per 16 query rows
  constexpr int kSTiles = kBlockK / 8;   // n8 tiles of S (key columns)
  static_assert(kBlockK % 16 == 0 && kBlockQ % 16 == 0 && kD % 32 == 0, "tile shapes");
  const FlashDeviceArgs& p = a.fwd;

  extern __shared__ __align__(128) unsigned char smem[];
  T* const sq = reinterpret_cast<T*>(smem);
  T* const sdo = sq + kBlockQ * kD;
  T* const sk = sdo + kBlockQ * kD;     // two stages
  T* const sv = sk + 2 * kBlockK * kD;  // two stages

  const BlockInputs<T> b = BlockInputsOf<T, kD>(p, kBlockQ);
  if (b.q_start >= b.span.q_len) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  const KeyTiles tiles = KeyTilesOf(p, b.span, b.q_start, kBlockQ, kBlockK);
  const int64_t q_offset = b.q_start * b.q_stride;
  LoadTile<T, kD, kBlockQ, kThreads>(sq, b.q + q_offset, b.q_stride, b.span.q_len - b.q_start);
  const T* const dout = static_cast<const T*>(a.dout) + b.span.q_begin * b.q_stride + b.head * kD;
  LoadTile<T, kD, kBlockQ, kThreads>(sdo, dout + q_offset, b.q_stride, b.span.q_len - b.q_start);
  auto load_kv = [&](int tile, int stage) {
    const int64_t j0 = (tiles.tile_begin + tile) * kBlockK;
    LoadTile<T, kD, kBlockK, kThreads>(sk + stage * kBlockK * kD, b.k + j0 * b.kv_stride,
                                       b.kv_stride, b.span.k_len - j0);
    LoadTile<T, kD, kBlockK, kThreads>(sv + stage * kBlockK * kD, b.v + j0 * b.kv_stride,
                                       b.kv_stride, b.span.k_len - j0);
  };
  if (tiles.num_tiles > 0) load_kv(0, 0);
  CommitCopies();

  float lse2[2], dsum[2];
  const int64_t row0 = b.q_start + warp * 16;
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + lane / 4 + 8 * r;
    const bool ok = row < b.span.q_len;
    const int64_t index = LseIndex(p, b.span, b.seq, b.head, ok ? row : 0);
    lse2[r] = ok ? p.lse[index] * kLog2e : INFINITY;
    dsum[r] = ok ? a.dsum[index] : 0.0f;
  }
  float dq[kD / 8][4];
#pragma unroll
  for (int d = 0; d < kD / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool plain = p.bias == nullptr && p.softcap <= 0.0f;
  for (int it = 0; it < tiles.num_tiles; ++it) {
    WaitCopies<0>();
    __syncthreads();
    if (it + 1 < tiles.num_tiles) load_kv(it + 1, (it + 1) % 2);
    CommitCopies();
    const T* const tk = sk + (it % 2) * kBlockK * kD;
    const T* const tv = sv + (it % 2) * kBlockK * kD;
    const int64_t j0 = (tiles.tile_begin + it) * kBlockK;

    float s[kSTiles][4];
    RowProducts<kBf16, kD>(s, sq, warp * 16, tk, lane);
    const bool full =
        plain && TileIsFull(p, b.span, b.q_start, b.q_start + kBlockQ - 1, j0, j0 + kBlockK - 1);
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = row0 + lane / 4 + 8 * (e >> 1);
        const int64_t j = j0 + n * 8 + 2 * t + (e & 1);
        s[n][e] = full ? Exp2(s[n][e] * scale_log2 - lse2[e >> 1])
                       : MaskedProbability(p, b.span, b.seq, b.head, i, j, s[n][e], lse2[e >> 1]);
      }
    }
    float ds[kSTiles][4];
    RowProducts<kBf16, kD>(ds, sdo, warp * 16, tv, lane);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ds[n][e] = s[n][e] * (ds[n][e] - dsum[e >> 1]);
        if (p.softcap > 0.0f) {
          const int64_t i = row0 + lane / 4 + 8 * (e >> 1);
          const int64_t j = j0 + n * 8 + 2 * t + (e & 1);
          ds[n][e] *= SoftcapFactor(p, b.seq, b.head, i, j, s[n][e], lse2[e >> 1]);
        }
      }
    }
    AccumulateProducts<kBf16, kD>(dq, ds, tk, lane);  // dQ += dS K
  }
  WaitCopies<0>();
  T* const dq_out = static_cast<T*>(a.dq) + b.span.q_begin * b.q_stride + b.head * kD;
  StoreAccumulator<T, kBf16, kD>(dq_out, b.q_stride, row0, b.span.q_len, dq, p.softmax_scale, lane);
}

// The first kernel of both launchers: D = rowsum(dout * out) into args.dsum. Sets `done` when
// nothing more is to be launched (no rows or no sequences).
template <typename T, int kD>
cudaError_t LaunchFlashBwdDot(const FlashBwdDeviceArgs& args, cudaStream_t stream, bool& done) {
  const int64_t rows = args.fwd.total_q * args.fwd.num_heads_q;
  done = rows == 0 || args.fwd.num_sequences == 0;
  if (done) return cudaSuccess;
  if ((rows + 7) / 8 > 2147483647) return cudaErrorInvalidConfiguration;
  FlashBwdDotKernel<T, kD><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(args);
  return cudaGetLastError();
}

// The grid of a kernel over key tiles of `block_k` rows: the longest sequence's key tiles x
// Hkv x sequences, x == 0 when there are none. cudaErrorInvalidConfiguration when too large.
inline cudaError_t FlashBwdKeyGrid(const FlashBwdDeviceArgs& args, int block_k, dim3& grid) {
  const FlashDeviceArgs& p = args.fwd;
  const int64_t k_tiles = FlashBwdKeyTiles(args, block_k);
  grid = dim3(0, 1, 1);
  if (k_tiles == 0) return cudaSuccess;
  if (k_tiles > 2147483647 || p.num_heads_kv > 65535 || p.num_sequences > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  grid = dim3(static_cast<unsigned>(k_tiles), static_cast<unsigned>(p.num_heads_kv),
              static_cast<unsigned>(p.num_sequences));
  return cudaSuccess;
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK>
cudaError_t LaunchFlashAttentionBwdMma(const FlashBwdDeviceArgs& args, cudaStream_t stream) {
  const FlashDeviceArgs& p = args.fwd;
  cudaError_t error = flash::CheckFlashArgs(p);
  if (error != cudaSuccess) return error;
  if (p.cu_seqlens_q != nullptr) {  // rows no sequence covers: zero gradients
    const size_t q_bytes = static_cast<size_t>(p.total_q * p.num_heads_q) * kHeadDim * sizeof(T);
    const size_t k_bytes = static_cast<size_t>(p.total_k * p.num_heads_kv) * kHeadDim * sizeof(T);
    if ((error = cudaMemsetAsync(args.dq, 0, q_bytes, stream)) != cudaSuccess ||
        (error = cudaMemsetAsync(args.dk, 0, k_bytes, stream)) != cudaSuccess ||
        (error = cudaMemsetAsync(args.dv, 0, k_bytes, stream)) != cudaSuccess) {
      return error;
    }
  }
  bool done = false;
  if ((error = flash::LaunchFlashBwdDot<T, kHeadDim>(args, stream, done)) != cudaSuccess || done) {
    return error;
  }
  dim3 key_grid;
  if ((error = flash::FlashBwdKeyGrid(args, kBlockK, key_grid)) != cudaSuccess) return error;
  if (key_grid.x > 0) {
    auto* dkv = &flash::FlashBwdDkvKernel<T, kHeadDim, kBlockQ, kBlockK>;
    const size_t shared = FlashBwdDkvSharedBytes(kHeadDim, kBlockQ, kBlockK);
    error = cudaFuncSetAttribute(dkv, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (error != cudaSuccess) return error;
    dkv<<<key_grid, kBlockK * 2, shared, stream>>>(args);
    if ((error = cudaGetLastError()) != cudaSuccess) return error;
  }
  dim3 grid;
  if ((error = flash::FlashGrid(p, kBlockQ, grid)) != cudaSuccess || grid.x == 0) return error;
  auto* dq = &flash::FlashBwdDqKernel<T, kHeadDim, kBlockQ, kBlockK>;
  const size_t shared = FlashBwdDqSharedBytes(kHeadDim, kBlockQ, kBlockK);
  error = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (error != cudaSuccess) return error;
  dq<<<grid, kBlockQ * 2, shared, stream>>>(args);
  if ((error = cudaGetLastError()) != cudaSuccess || args.dbias == nullptr) return error;
  return flash::LaunchFlashBwdDbias<T, kHeadDim>(args, stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DEVICE_CUH_
