// dbias of the flash attention backward on any sm_80+ GPU (mma.sync), launched after dK, dV
// and dQ by both launchers when the call asks for it (args.dbias set).
//
// dbias_ij is dS_ij (the gradient of the logits after the soft cap, where the bias is added),
// summed over the sequences and heads the bias broadcasts over. A block owns one query tile of
// 64 rows of one slice of dbias ([Bb, Hb, Sq, Sk], Bb in {1, B}, Hb in {1, Hq}) and walks the
// key tiles its rows can see; for each it recomputes S = Q K^T, P and dP = dO V^T of every
// (sequence, head) that adds to the slice, in a fixed order, sums dS in registers and stores
// the 64 x 64 tile once. So no sum crosses blocks: the same inputs give the same bits, with no
// workspace. It costs two of the backward's five products again; the pairs no row sees are
// zeros (cleared first). The bias tile, the same for every pair of a slice, is loaded once per
// key tile into shared memory, and the probabilities are computed inline from it (a call per
// element, each waiting for its own load of the bias, took as long as the products).
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DBIAS_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DBIAS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_bwd_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_device.cuh"

namespace kernelserve::cuda::flash {

constexpr int kDbiasBlockQ = 64;  // 4 warps of 16 query rows
constexpr int kDbiasBlockK = 64;
constexpr int kDbiasThreads = kDbiasBlockQ * 2;
constexpr int kDbiasBiasStride = kDbiasBlockK + 4;  // floats a bias row in shared memory

// The slices of dbias: [batches, heads] of the bias (a stride of 0 broadcasts that dim).
struct DbiasSlices {
  int64_t batches;
  int64_t heads;
};
__host__ __device__ inline DbiasSlices DbiasSlicesOf(const FlashDeviceArgs& p) {
  return {p.bias_batch_stride == 0 ? 1 : p.num_sequences,
          p.bias_head_stride == 0 ? 1 : p.num_heads_q};
}

// Starts copying the bias tile of the block's query rows from i0 and the key tile from j0
// (rows of kDbiasBiasStride floats; past the sequence 0) into `sbias`.
__device__ __forceinline__ void LoadDbiasBiasTile(const FlashDeviceArgs& p, const float* bias,
                                                  int64_t i0, int64_t j0, float* sbias) {
  for (int x = threadIdx.x; x < kDbiasBlockQ * kDbiasBlockK; x += kDbiasThreads) {
    const int r = x / kDbiasBlockK, c = x % kDbiasBlockK;
    const bool ok = i0 + r < p.seq_len_q && j0 + c < p.seq_len_k;
    CopyAsync4(SharedAddress(sbias + r * kDbiasBiasStride + c),
               bias + (ok ? (i0 + r) * p.seq_len_k + j0 + c : 0), ok);
  }
}

// Adds dS of (sequence seq, head head) for the warp's 16 query rows from i0 + warp * 16 and the
// key tile from j0 to `acc`. REQUIRES: the tiles loaded (Q and dO rows of the block, K and V
// rows of the key tile, the bias tile).
template <typename T, int kD>
__device__ __forceinline__ void AddDbiasTile(const FlashBwdDeviceArgs& a, const Span& span,
                                             int64_t seq, int64_t head, int64_t i0, int64_t j0,
                                             const T* sq, const T* sdo, const T* sk, const T* sv,
                                             const float* sbias,
                                             float (&acc)[kDbiasBlockK / 8][4]) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kSTiles = kDbiasBlockK / 8;
  const FlashDeviceArgs& p = a.fwd;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = i0 + warp * 16;
  float lse2[2], dsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + lane / 4 + 8 * r;
    const bool ok = row < span.q_len;
    const int64_t index = LseIndex(p, span, seq, head, ok ? row : 0);
    lse2[r] = ok ? p.lse[index] * kLog2e : INFINITY;  // P = 0 past the sequence
    dsum[r] = ok ? a.dsum[index] : 0.0f;
  }
  float s[kSTiles][4], dp[kSTiles][4];
  RowProducts<kBf16, kD>(s, sq, warp * 16, sk, lane);
  RowProducts<kBf16, kD>(dp, sdo, warp * 16, sv, lane);
  // PairProbability's rule, with the bias from the shared tile. Helpers shared with
  // PairProbability changed the wgmma kernel's register allocation (184 spill stores instead of
  // 156 at D = 128), so the few lines stay restated here.
  const PairMask mask = PairMaskOf(p, span);
#pragma unroll
  for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = warp * 16 + lane / 4 + 8 * (e >> 1);
      const int c = n * 8 + 2 * (lane % 4) + (e & 1);
      const int64_t i = i0 + r, j = j0 + c;
      bool visible = mask.Visible(static_cast<int>(i), static_cast<int>(j));
      if (visible && p.q_segment_ids != nullptr) {
        const int64_t segment = p.q_segment_ids[seq * p.seq_len_q + i];
        visible = segment > 0 && p.kv_segment_ids[seq * p.seq_len_k + j] == segment;
      }
      float x = s[n][e] * p.softmax_scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(__fdividef(x, p.softcap));
      x += sbias[r * kDbiasBiasStride + c];
      const float prob = visible ? Exp2(x * kLog2e - lse2[e >> 1]) : 0.0f;
      acc[n][e] += prob * (dp[n][e] - dsum[e >> 1]);
    }
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(kDbiasThreads) FlashBwdDbiasKernel(const FlashBwdDeviceArgs a) {
  constexpr int kSTiles = kDbiasBlockK / 8;
  const FlashDeviceArgs& p = a.fwd;
  extern __shared__ __align__(128) unsigned char dbias_smem[];
  T* const sq = reinterpret_cast<T*>(dbias_smem);
  T* const sdo = sq + kDbiasBlockQ * kD;
  T* const sk = sdo + kDbiasBlockQ * kD;
  T* const sv = sk + kDbiasBlockK * kD;
  float* const sbias = reinterpret_cast<float*>(sv + kDbiasBlockK * kD);
  const DbiasSlices slices = DbiasSlicesOf(p);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kDbiasBlockQ;
  const int64_t slice_b = blockIdx.z, slice_h = blockIdx.y;
  // The (sequence, head) pairs that add to this slice, sequences outer.
  const int64_t seq_lo = slices.batches == 1 ? 0 : slice_b;
  const int64_t seq_hi = slices.batches == 1 ? p.num_sequences : slice_b + 1;
  const int64_t head_lo = slices.heads == 1 ? 0 : slice_h;
  const int64_t head_hi = slices.heads == 1 ? p.num_heads_q : slice_h + 1;
  const int64_t group = p.num_heads_q / p.num_heads_kv;
  const int64_t q_stride = p.num_heads_q * kD;
  const int64_t kv_stride = p.num_heads_kv * kD;
  // Dense (a bias has no varlen form): every sequence has the same span lengths and tiles.
  const KeyTiles tiles = KeyTilesOf(p, SpanOf(p, seq_lo), i0, kDbiasBlockQ, kDbiasBlockK);
  const int64_t slice = slice_b * p.bias_batch_stride + slice_h * p.bias_head_stride;
  float* const out = a.dbias + slice;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int tile = 0; tile < tiles.num_tiles; ++tile) {
    const int64_t j0 = (tiles.tile_begin + tile) * kDbiasBlockK;
    float acc[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    __syncthreads();  // the previous key tile's bias is read
    LoadDbiasBiasTile(p, p.bias + slice, i0, j0, sbias);
    for (int64_t seq = seq_lo; seq < seq_hi; ++seq) {
      const Span span = SpanOf(p, seq);
      for (int64_t head = head_lo; head < head_hi; ++head) {
        __syncthreads();  // the previous pair's tiles are read
        const int64_t q_offset = (span.q_begin + i0) * q_stride + head * kD;
        const int64_t kv_offset = (span.k_begin + j0) * kv_stride + (head / group) * kD;
        LoadTile<T, kD, kDbiasBlockQ, kDbiasThreads>(sq, static_cast<const T*>(p.q) + q_offset,
                                                     q_stride, span.q_len - i0);
        LoadTile<T, kD, kDbiasBlockQ, kDbiasThreads>(sdo, static_cast<const T*>(a.dout) + q_offset,
                                                     q_stride, span.q_len - i0);
        LoadTile<T, kD, kDbiasBlockK, kDbiasThreads>(sk, static_cast<const T*>(p.k) + kv_offset,
                                                     kv_stride, span.k_len - j0);
        LoadTile<T, kD, kDbiasBlockK, kDbiasThreads>(sv, static_cast<const T*>(p.v) + kv_offset,
                                                     kv_stride, span.k_len - j0);
        CommitCopies();
        WaitCopies<0>();
        __syncthreads();
        AddDbiasTile<T, kD>(a, span, seq, head, i0, j0, sq, sdo, sk, sv, sbias, acc);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = i0 + warp * 16 + lane / 4 + 8 * r;
      if (i >= p.seq_len_q) continue;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        const int64_t j = j0 + n * 8 + 2 * (lane % 4);
        if (j < p.seq_len_k) out[i * p.seq_len_k + j] = acc[n][2 * r];
        if (j + 1 < p.seq_len_k) out[i * p.seq_len_k + j + 1] = acc[n][2 * r + 1];
      }
    }
  }
}

// Clears args.dbias and launches the dbias kernel after the others on `stream` (they wrote
// args.dsum). REQUIRES: args.dbias set, the problem dense, args.dsum written.
template <typename T, int kD>
cudaError_t LaunchFlashBwdDbias(const FlashBwdDeviceArgs& args, cudaStream_t stream) {
  const FlashDeviceArgs& p = args.fwd;
  const DbiasSlices slices = DbiasSlicesOf(p);
  const size_t values =
      static_cast<size_t>(slices.batches * slices.heads) * p.seq_len_q * p.seq_len_k;
  cudaError_t error = cudaMemsetAsync(args.dbias, 0, values * sizeof(float), stream);
  if (error != cudaSuccess || values == 0) return error;
  if (p.cu_seqlens_q != nullptr || slices.heads > 65535 || slices.batches > 65535) {
    return cudaErrorInvalidValue;
  }
  const int64_t q_tiles = (p.seq_len_q + kDbiasBlockQ - 1) / kDbiasBlockQ;
  if (q_tiles > 2147483647) return cudaErrorInvalidConfiguration;
  auto* kernel = &FlashBwdDbiasKernel<T, kD>;
  const size_t shared = 2 * (kDbiasBlockQ + kDbiasBlockK) * kD * sizeof(T) +
                        kDbiasBlockQ * kDbiasBiasStride * sizeof(float);
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (error != cudaSuccess) return error;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(slices.heads),
                  static_cast<unsigned>(slices.batches));
  kernel<<<grid, kDbiasThreads, shared, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DBIAS_CUH_
