// The flash attention backward kernel for Hopper (sm_90a: wgmma), included by the per-head-dim
// .cu files beside the mma.sync kernels of flash_attention_bwd_device.cuh.
//
// One kernel computes dK, dV and dQ (FlashAttention-2's loop, on warpgroup MMAs). A block of
// two warpgroups takes a key tile of 128 rows (64 a warpgroup) of one kv head and streams the
// query tiles of 64 rows, of every query head of the group, that can see those keys:
//
//   S^T = K Q^T, dP^T = V dO^T             wgmma, both operands in shared memory
//   P^T = exp(logits - lse)                registers (masks, bias and soft cap as the forward)
//   dS^T = P^T (dP^T - D)                  registers; also stored to shared memory
//   dV += P^T dO, dK += dS^T Q             wgmma, P^T and dS^T from registers
//   dQ_tile = dS K                         wgmma, dS read transposed from shared memory
//
// Each warpgroup takes half of dQ_tile's columns; the tile goes through shared memory (fp32)
// and one bulk reduction adds it to a workspace (dq_accum) that a last kernel scales and
// rounds into dq. With a lock array the blocks that add to one query tile take turns in a
// fixed order, so the sums run in the same order every time and the same inputs give the same
// bits; without one they add in any order. The order is the last key tile first: under a
// causal mask the block of key tile n + 1 reached each query tile two iterations before the
// block of key tile n, so nobody waits, and the grid's x runs the key tiles from the last, so
// that a block only ever waits for blocks launched before it.
//
// Q and dO (two stages), K and V sit in shared memory in the 128-byte-swizzled layout of the
// forward's wgmma kernel (flash_attention_wgmma.cuh), loaded by cp.async.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_bwd_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_wgmma.cuh"

namespace kernelserve::cuda::flash {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ int LoadAcquire(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}
__device__ __forceinline__ void StoreRelease(int* address, int value) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}
__device__ __forceinline__ void StoreShared32(uint32_t address, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
__device__ __forceinline__ void StoreShared64(uint32_t address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(x), "f"(y) : "memory");
}
// dst[0, bytes) += src[0, bytes) in fp32, by the tensor memory accelerator (one bulk
// operation); BulkWaitComplete waits until it (and every earlier one of this thread) is done.
// REQUIRES: bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void BulkReduceAdd(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void BulkWaitComplete() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Waits for turn `rank` on `lock` (none when null), adds `bytes` of fp32 values at shared
// address `src` to `dst` (BulkReduceAdd), waits until that is done and passes the turn on.
__device__ __forceinline__ void AddInTurn(float* dst, uint32_t src, uint32_t bytes, int* lock,
                                          int rank) {
  if (lock != nullptr) {
    while (LoadAcquire(lock) != rank) {
    }
  }
  BulkReduceAdd(dst, src, bytes);
  BulkWaitComplete();
  if (lock != nullptr) {
    __threadfence();
    StoreRelease(lock, rank + 1);
  }
}

// d (+)= A B over one k16 step, A and B both read MN-major, for N = kN (32 or 64) columns.
template <bool kBf16, int kN>
__device__ __forceinline__ void MmaSsTransposed(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                                int scale) {
  if constexpr (kN == 32) {
    wgmma::MmaSs32<kBf16, 1, 1>(d, a, b, scale);
  } else {
    static_assert(kN == 64, "N is 32 or 64");
    wgmma::MmaSs64<kBf16, 1, 1>(d, a, b, scale);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int kD, int kBlockQ, int kBlockK>
__global__ void __launch_bounds__(256, 1) FlashBwdWgmmaKernel(const FlashBwdDeviceArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = 256;         // two warpgroups, 64 keys each
  constexpr int kSTiles = kBlockQ / 8;  // n8 tiles of S^T (query columns)
  constexpr int kDqCols = kD / 2;       // the columns of dQ a warpgroup takes
  constexpr uint32_t kQBytes = kBlockQ * kD * 2;
  constexpr uint32_t kKBytes = kBlockK * kD * 2;
  static_assert(kBlockK == 128 && kBlockQ == 64, "two warpgroups of 64 keys; dS^T rows of 64");
  static_assert(kD == 64 || kD == 128, "dQ: 32 or 64 columns a warpgroup");
  const FlashDeviceArgs& p = a.fwd;

  extern __shared__ __align__(128) unsigned char bwd_wgmma_smem[];
  const uint32_t base = SharedAddress(bwd_wgmma_smem);
  const uint32_t sk = base + ((1024 - (base % 1024)) % 1024);
  const uint32_t sv = sk + kKBytes;
  const uint32_t sq = sv + kKBytes;                  // two stages
  const uint32_t sdo = sq + 2 * kQBytes;             // two stages
  const uint32_t sds = sdo + 2 * kQBytes;            // dS^T: kBlockK rows of kBlockQ values
  const uint32_t sdq = sds + kBlockK * kBlockQ * 2;  // dQ_tile: kBlockQ rows of kD floats
  float* const slse =                                // two stages
      reinterpret_cast<float*>(bwd_wgmma_smem + (sdq + kBlockQ * kD * 4 - base));
  float* const sdsum = slse + 2 * kBlockQ;  // two stages

  const int64_t seq = blockIdx.z;
  const int64_t kv_head = blockIdx.y;
  const Span span = SpanOf(p, seq);
  const int64_t n = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;  // the last key tile first
  const int64_t j0 = n * kBlockK;
  if (j0 >= span.k_len) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warpgroup = warp / 4;
  const int t = lane % 4;
  const int64_t group = p.num_heads_q / p.num_heads_kv;
  const int64_t q_stride = p.num_heads_q * kD;
  const int64_t kv_stride = p.num_heads_kv * kD;
  const int64_t kv_offset = (span.k_begin + j0) * kv_stride + kv_head * kD;
  const int64_t longest_q = p.cu_seqlens_q != nullptr ? p.max_seq_len_q : p.seq_len_q;
  const int64_t lock_tiles = (longest_q + kBlockQ - 1) / kBlockQ;

  int64_t i_lo, i_hi;
  QueryRange(p, span, j0, min(j0 + kBlockK, span.k_len) - 1, i_lo, i_hi);
  const int64_t tile0 = i_lo / kBlockQ;
  const int q_tiles = i_hi >= i_lo ? static_cast<int>(i_hi / kBlockQ - tile0 + 1) : 0;
  const int items = q_tiles * static_cast<int>(group);  // (head of the group, query tile)

  LoadTileSw128<T, kD, kBlockK, kThreads>(sk, static_cast<const T*>(p.k) + kv_offset, kv_stride,
                                          span.k_len - j0);
  LoadTileSw128<T, kD, kBlockK, kThreads>(sv, static_cast<const T*>(p.v) + kv_offset, kv_stride,
                                          span.k_len - j0);
  auto load_item = [&](int item, int stage) {
    const int64_t head = kv_head * group + item / q_tiles;
    const int64_t i0 = (tile0 + item % q_tiles) * kBlockQ;
    const int64_t offset = (span.q_begin + i0) * q_stride + head * kD;
    LoadTileSw128<T, kD, kBlockQ, kThreads>(
        sq + stage * kQBytes, static_cast<const T*>(p.q) + offset, q_stride, span.q_len - i0);
    LoadTileSw128<T, kD, kBlockQ, kThreads>(
        sdo + stage * kQBytes, static_cast<const T*>(a.dout) + offset, q_stride, span.q_len - i0);
    // lse and D of rows past the sequence are 0: only the masked path sees them (P = 0 there).
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
  // This warpgroup's 64 keys of K and V: column block c at + c * kBlockK * 128.
  const uint32_t k_rows = sk + warpgroup * 64 * 128;
  const uint32_t v_rows = sv + warpgroup * 64 * 128;
  // acc = the warpgroup's 64 rows at `rows` (of a kBlockK-row tile) times the kBlockQ rows of
  // tile `tile`, transposed: k16 step ks reads 32 bytes into each 128-byte row of column
  // block ks / 4. One commit group.
  auto issue_by_rows = [&](float(&acc)[kSTiles][4], uint32_t rows, uint32_t tile) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t step = (ks % 4) * 32u;
      MmaSs<kBf16, kBlockQ>(acc, Descriptor(rows + (ks / 4) * kBlockK * 128u + step, 16, 1024),
                            Descriptor(tile + (ks / 4) * kBlockQ * 128u + step, 16, 1024),
                            ks > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  const int key_row = warpgroup * 64 + (warp % 4) * 16 + lane / 4;  // + 8 for e >= 2
  // This warpgroup's columns of dQ, [kDqCols * warpgroup, kDqCols * (warpgroup + 1)), in K's
  // tile: column block, then bytes into its 128-byte rows. No branch depends on the warpgroup:
  // a divergent path would serialize the warpgroup MMAs.
  const int dq_col0 = warpgroup * kDqCols;
  const uint32_t k_cols = sk + (dq_col0 / 64) * kBlockK * 128u + (dq_col0 % 64) * 2u;
  for (int it = 0; it < items; ++it) {
    WaitCopies<0>();
    FenceProxyAsync();
    __syncthreads();
    if (it + 1 < items) load_item(it + 1, (it + 1) % 2);
    CommitCopies();
    const int stage = it % 2;
    const uint32_t tq = sq + stage * kQBytes;
    const uint32_t tdo = sdo + stage * kQBytes;
    const float* const lse = slse + stage * kBlockQ;
    const float* const dsum = sdsum + stage * kBlockQ;
    const int64_t head = kv_head * group + it / q_tiles;
    const int64_t i0 = (tile0 + it % q_tiles) * kBlockQ;

    // S^T = K Q^T and dP^T = V dO^T for the warpgroup's keys (rows) and the tile's queries.
    float s[kSTiles][4], ds[kSTiles][4];
    WgmmaFence();
    issue_by_rows(s, k_rows, tq);
    issue_by_rows(ds, v_rows, tdo);
    WgmmaWait<1>();
    FenceRegisters(s);
    const bool full = plain && TileIsFull(p, span, i0, i0 + kBlockQ - 1, j0, j0 + kBlockK - 1);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        const int64_t j = j0 + key_row + 8 * (e >> 1);
        const float lse2 = lse[col] * kLog2e;
        s[nt][e] = full ? Exp2(s[nt][e] * scale_log2 - lse2)
                        : MaskedProbability(p, span, seq, head, i0 + col, j, s[nt][e], lse2);
      }
    }
    WgmmaWait<0>();
    FenceRegisters(ds);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        ds[nt][e] = s[nt][e] * (ds[nt][e] - dsum[col]);
        if (p.softcap > 0.0f) {
          const int64_t j = j0 + key_row + 8 * (e >> 1);
          ds[nt][e] *= SoftcapFactor(p, seq, head, i0 + col, j, s[nt][e], lse[col] * kLog2e);
        }
      }
    }
    uint32_t pa[kBlockQ / 16][4], dsa[kBlockQ / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockQ / 16; ++kk) {
      ProbabilityFragment<kBf16>(s, kk, pa[kk]);
      ProbabilityFragment<kBf16>(ds, kk, dsa[kk]);
    }
    // dS^T to shared memory: key rows of 64 query values (one 128-byte swizzle block).
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = key_row + 8 * r;
        const uint32_t at = sds + row * 128u + ((nt ^ (row % 8)) * 16u) + 4u * t;
        StoreShared32(at, Pack<kBf16>(ds[nt][2 * r], ds[nt][2 * r + 1]));
      }
    }
    // dV += P^T dO and dK += dS^T Q: k16 step kk takes queries [16 kk, 16 kk + 16).
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBlockQ / 16; ++kk) {
      MmaRsTransB<kBf16, kD>(dv, pa[kk], Descriptor(tdo + kk * 2048u, kBlockQ * 128u, 1024));
    }
#pragma unroll
    for (int kk = 0; kk < kBlockQ / 16; ++kk) {
      MmaRsTransB<kBf16, kD>(dk, dsa[kk], Descriptor(tq + kk * 2048u, kBlockQ * 128u, 1024));
    }
    WgmmaCommit();
    FenceProxyAsync();  // dS^T's stores before the tensor cores read them
    __syncthreads();    // both warpgroups' dS^T

    // This warpgroup's columns of dQ_tile = dS K over the block's 128 keys: A is dS^T's tile
    // read transposed, B the K tile read MN-major.
    float dq[kDqCols / 8][4];
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      MmaSsTransposed<kBf16, kDqCols>(dq, Descriptor(sds + kk * 2048u, kBlockK * 128u, 1024),
                                      Descriptor(k_cols + kk * 2048u, kBlockK * 128u, 1024),
                                      kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceRegisters(dv);
    FenceRegisters(dk);
    FenceRegisters(pa);
    FenceRegisters(dsa);
    FenceRegisters(dq);

    // dQ_tile to shared memory (fp32 rows of kD, as dq_accum holds them), then one bulk
    // reduction adds its valid rows to dq_accum: after the blocks before this one in the
    // tile's order (lock), and done before the next may start.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = (warp % 4) * 16 + lane / 4 + 8 * r;
#pragma unroll
      for (int nt = 0; nt < kDqCols / 8; ++nt) {
        StoreShared64(sdq + (row * kD + dq_col0 + nt * 8 + 2 * t) * 4u, dq[nt][2 * r],
                      dq[nt][2 * r + 1]);
      }
    }
    FenceProxyAsync();
    __syncthreads();
    if (threadIdx.x == 0) {
      int* const lock = a.dq_locks != nullptr
                            ? a.dq_locks + (seq * p.num_heads_q + head) * lock_tiles + i0 / kBlockQ
                            : nullptr;
      // The blocks adding to this tile run from the last key tile that sees one of its rows.
      const int rank = static_cast<int>(
          LastKeyTileSeeing(p, span, min(i0 + kBlockQ, span.q_len) - 1, kBlockK) - n);
      const int64_t rows = min(int64_t{kBlockQ}, span.q_len - i0);
      AddInTurn(a.dq_accum + (head * p.total_q + span.q_begin + i0) * kD, sdq,
                static_cast<uint32_t>(rows * kD * 4), lock, rank);
    }
  }
  WaitCopies<0>();
  const int64_t row0 = j0 + warpgroup * 64 + (warp % 4) * 16;
  T* const dk_out = static_cast<T*>(a.dk) + span.k_begin * kv_stride + kv_head * kD;
  T* const dv_out = static_cast<T*>(a.dv) + span.k_begin * kv_stride + kv_head * kD;
  StoreAccumulator<T, kBf16, kD>(dk_out, kv_stride, row0, span.k_len, dk, p.softmax_scale, lane);
  StoreAccumulator<T, kBf16, kD>(dv_out, kv_stride, row0, span.k_len, dv, 1.0f, lane);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// dq = softmax_scale * dq_accum, rounded to T: four values a thread, i counting them in dq's
// order ([total_q, Hq, kD]; dq_accum is [Hq, total_q, kD]).
template <typename T, int kD>
__global__ void __launch_bounds__(256)
    FlashBwdDqRoundKernel(const FlashBwdDeviceArgs a, int64_t count4) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count4) return;
  const int64_t row = i / (a.fwd.num_heads_q * (kD / 4));
  const int64_t head = i / (kD / 4) % a.fwd.num_heads_q;
  const int64_t col4 = i % (kD / 4);
  const float4 v =
      reinterpret_cast<const float4*>(a.dq_accum)[(head * a.fwd.total_q + row) * (kD / 4) + col4];
  const float scale = a.fwd.softmax_scale;
  uint2 packed;
  packed.x = Pack<kBf16>(v.x * scale, v.y * scale);
  packed.y = Pack<kBf16>(v.z * scale, v.w * scale);
  reinterpret_cast<uint2*>(a.dq)[i] = packed;
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK>
cudaError_t LaunchFlashAttentionBwdWgmma(const FlashBwdDeviceArgs& args, cudaStream_t stream) {
  const FlashDeviceArgs& p = args.fwd;
  cudaError_t error = flash::CheckFlashArgs(p);
  if (error != cudaSuccess) return error;
  if (args.dq_accum == nullptr) return cudaErrorInvalidValue;
  const int64_t q_values = p.total_q * p.num_heads_q * kHeadDim;
  if ((error = cudaMemsetAsync(args.dq_accum, 0, static_cast<size_t>(q_values) * sizeof(float),
                               stream)) != cudaSuccess) {
    return error;
  }
  if (args.dq_locks != nullptr) {
    const size_t locks = FlashBwdLockCount(p, kBlockQ);
    if ((error = cudaMemsetAsync(args.dq_locks, 0, locks * sizeof(int), stream)) != cudaSuccess) {
      return error;
    }
  }
  if (p.cu_seqlens_q != nullptr) {  // key rows no sequence covers: zero gradients
    const size_t k_bytes = static_cast<size_t>(p.total_k * p.num_heads_kv) * kHeadDim * sizeof(T);
    if ((error = cudaMemsetAsync(args.dk, 0, k_bytes, stream)) != cudaSuccess ||
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
    auto* kernel = &flash::FlashBwdWgmmaKernel<T, kHeadDim, kBlockQ, kBlockK>;
    const size_t shared = FlashBwdWgmmaSharedBytes(kHeadDim, kBlockQ, kBlockK);
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (error != cudaSuccess) return error;
    kernel<<<key_grid, 256, shared, stream>>>(args);
    if ((error = cudaGetLastError()) != cudaSuccess) return error;
  }
  const int64_t count4 = q_values / 4;
  if ((count4 + 255) / 256 > 2147483647) return cudaErrorInvalidConfiguration;
  flash::FlashBwdDqRoundKernel<T, kHeadDim>
      <<<static_cast<unsigned>((count4 + 255) / 256), 256, 0, stream>>>(args, count4);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_
