// The flash attention forward kernel for Hopper (sm_90a: wgmma), included by the per-head-dim
// .cu files beside the mma.sync kernel of flash_attention_device.cuh.
//
// One block takes 64 query rows per warpgroup (kWarps / 4 warpgroups) of one head of one
// sequence. Q, K and V tiles sit in shared memory in the 128-byte-swizzled layout wgmma reads
// (columns in blocks of 64 elements, each row of a block 128 bytes, 16-byte chunk c of row r
// at c ^ (r % 8)), filled by cp.async through kStages K/V stages. S = Q K^T runs as wgmma with
// both operands in shared memory, the online softmax on the fp32 accumulators in registers
// (the same code as the mma.sync kernel: flash_attention_common.cuh), and O += P V as wgmma
// with P in registers and V read MN-major from shared memory. Key tiles no row of the block
// can see are never loaded; tiles every row sees in full skip the per-element mask.
//
// A head dim that is not a whole number of 64-element blocks (D = 96) is laid out at the next
// one (FlashWgmmaWidth: 128): S = Q K^T reads only the D real columns, and O += P V runs on the
// padded width, whose extra columns of V are zeroed once and whose extra columns of O are never
// stored.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WGMMA_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"
#include "kernels/flash_attention/cuda/wgmma_ops.cuh"

namespace kernelserve::cuda::flash {

// Byte offset of element (row, col) in a 128-byte-swizzled tile of `rows` rows.
// REQUIRES: col % 8 == 0; the tile starts on a 1024-byte boundary.
__device__ __forceinline__ uint32_t Sw128Offset(int rows, int row, int col) {
  const int block = col / 64;
  const int chunk = (col % 64) / 8;
  return static_cast<uint32_t>(block * rows * 128 + row * 128 + ((chunk ^ (row % 8)) * 16));
}

// Starts copying kRows rows of kD values (row r from src + r * stride) into a
// 128-byte-swizzled tile at shared address `tile`; rows at or past `valid` are zero-filled.
template <typename T, int kD, int kRows, int kThreads>
__device__ __forceinline__ void LoadTileSw128(uint32_t tile, const T* src, int64_t stride,
                                              int64_t valid) {
  LoadRows<T, kD, kRows, kThreads, FlashWgmmaWidth(kD) / 8>(
      tile, src, stride, valid, [](int r, int c) { return Sw128Offset(kRows, r, c); });
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A shared-memory matrix descriptor of a 128-byte-swizzled operand. For K-major operands
// `leading` is unused and `stride` is the distance between 8-row groups (1024); for MN-major
// ones `leading` is the distance between 64-element column blocks.
__device__ __forceinline__ uint64_t Descriptor(uint32_t address, uint32_t leading,
                                               uint32_t stride) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading >> 4) << 16) | (static_cast<uint64_t>(stride >> 4) << 32) |
         (uint64_t{1} << 62);
}

// Descriptor(address + offset, leading, stride) from base = Descriptor(address, ...): offset
// >> 4 added to the address field (bits 0-13) of the low word, which cannot carry out of it
// while address + offset stays below 256 KiB (all of shared memory). One add where
// Descriptor is four operations. REQUIRES: offset % 16 == 0.
__device__ __forceinline__ uint64_t DescriptorPlus(uint64_t base, uint32_t offset) {
  const uint32_t low = static_cast<uint32_t>(base) + (offset >> 4);
  return (base & 0xFFFFFFFF00000000ull) | low;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed groups of this warpgroup are still in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Orders ordinary shared-memory writes (cp.async) before the tensor cores' reads.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Zeroes columns [kD, kWidth) of a kRows-row 128-byte-swizzled tile at shared address `tile`.
template <int kD, int kWidth, int kRows, int kThreads>
__device__ __forceinline__ void ZeroPadColumns(uint32_t tile) {
  constexpr int kPadChunks = (kWidth - kD) / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kPadChunks; i += kThreads) {
    const uint32_t at = tile + Sw128Offset(kRows, i / kPadChunks, kD + (i % kPadChunks) * 8);
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
  }
}

// Keeps the compiler from moving reads or writes of these registers across this point (they
// are written by the tensor cores between an issue and its wait).
template <typename R, int kN>
__device__ __forceinline__ void FenceRegisters(R (&r)[kN][4]) {
  static_assert(std::is_same_v<R, float> || std::is_same_v<R, uint32_t>, "32-bit registers");
#pragma unroll
  for (int i = 0; i < kN; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same_v<R, float>) {
        asm volatile("" : "+f"(r[i][j])::"memory");
      } else {
        asm volatile("" : "+r"(r[i][j])::"memory");
      }
    }
  }
}

// d (+)= A B over one k16 step for N = kN (64 or 128) columns.
template <bool kBf16, int kN>
__device__ __forceinline__ void MmaSs(float (&d)[kN / 8][4], uint64_t a, uint64_t b, int scale) {
  if constexpr (kN == 64) {
    wgmma::MmaSs64<kBf16, 0>(d, a, b, scale);
  } else {
    static_assert(kN == 128, "N is 64 or 128");
    wgmma::MmaSs128<kBf16, 0>(d, a, b, scale);
  }
}
template <bool kBf16, int kN>
__device__ __forceinline__ void MmaRsTransB(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                            uint64_t b) {
  if constexpr (kN == 64) {
    wgmma::MmaRs64<kBf16, 1>(d, a, b, 1);
  } else {
    static_assert(kN == 128, "N is 64 or 128");
    wgmma::MmaRs128<kBf16, 1>(d, a, b, 1);
  }
}

// S = Q K^T of one warpgroup's 64 query rows (column block c at q_rows + c * kBlockQ * 128)
// and a kBlockK-row K tile, issued and committed as one group: k16 step ks reads 32 bytes
// into each 128-byte row of column block ks / 4.
template <bool kBf16, int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void IssueQkT(float (&s)[kBlockK / 8][4], uint32_t q_rows,
                                         uint32_t k_tile) {
  const uint64_t q_desc = Descriptor(q_rows, 16, 1024);
  const uint64_t k_desc = Descriptor(k_tile, 16, 1024);
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    const uint32_t step = (ks % 4) * 32u;
    const uint64_t a = DescriptorPlus(q_desc, (ks / 4) * kBlockQ * 128u + step);
    const uint64_t b = DescriptorPlus(k_desc, (ks / 4) * kBlockK * 128u + step);
    MmaSs<kBf16, kBlockK>(s, a, b, ks > 0 ? 1 : 0);
  }
  WgmmaCommit();
}

// O += P V for a kBlockK-row V tile, P in registers (pa[kk]: keys [16 kk, 16 kk + 16)),
// issued and committed as one group. One wgmma covers at most 128 columns of O: at D = 256
// each step runs on two halves of O and V (V's columns 128.. start two 64-column blocks in).
template <bool kBf16, int kWidth, int kBlockK>
__device__ __forceinline__ void IssuePv(float (&o)[kWidth / 8][4],
                                        const uint32_t (&pa)[kBlockK / 16][4], uint32_t v_tile) {
  constexpr int kPvN = kWidth < 128 ? kWidth : 128;
  const uint64_t v_desc = Descriptor(v_tile, kBlockK * 128u, 1024);
#pragma unroll
  for (int kk = 0; kk < kBlockK / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < kWidth / kPvN; ++h) {
      auto& o_part = reinterpret_cast<float(&)[kPvN / 8][4]>(o[h * (kPvN / 8)]);
      const uint32_t v_offset = h * (kPvN / 64) * kBlockK * 128u + kk * 2048u;
      MmaRsTransB<kBf16, kPvN>(o_part, pa[kk], DescriptorPlus(v_desc, v_offset));
    }
  }
  WgmmaCommit();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Shared memory of one block: the Q tile and kStages K and V tiles, plus slack to align the
// start to 1024 bytes.
constexpr size_t WgmmaSharedBytes(int head_dim, int block_q, int block_k, int num_stages) {
  return FlashSharedBytes(FlashWgmmaWidth(head_dim), block_q, block_k, num_stages) + 1024;
}

template <typename T, int kD, int kBlockQ, int kBlockK, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32, 1) FlashWgmmaKernel(const FlashDeviceArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kWidth = FlashWgmmaWidth(kD);  // of a tile row in shared memory
  constexpr int kSTiles = kBlockK / 8;         // n8 tiles of S
  constexpr int kOTiles = kWidth / 8;          // n8 tiles of O (those past D are not stored)
  constexpr uint32_t kTileBytes = kBlockK * kWidth * 2;
  static_assert(kBlockQ == 16 * kWarps && kWarps % 4 == 0, "64 query rows per warpgroup");
  static_assert(kD % 16 == 0 && kBlockK % 64 == 0, "whole k16 steps and swizzle atoms");
  static_assert(kStages >= 3, "two tiles in use and at least one loading");

  extern __shared__ __align__(128) unsigned char wgmma_smem[];
  const uint32_t base = SharedAddress(wgmma_smem);
  const uint32_t sq = base + ((1024 - (base % 1024)) % 1024);
  const uint32_t sk = sq + kBlockQ * kWidth * 2;
  const uint32_t sv = sk + kStages * kTileBytes;

  const BlockInputs<T> b = BlockInputsOf<T, kD>(p, kBlockQ);
  if (b.q_start >= b.span.q_len) return;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warpgroup = warp / 4;

  const KeyTiles tiles = KeyTilesOf(p, b.span, b.q_start, kBlockQ, kBlockK);
  const ThreadRows rows = ThreadRowsOf(b.q_start + warp * 16, lane);
  const bool has_segments = p.q_segment_ids != nullptr;
  const int t = lane % 4;

  LoadTileSw128<T, kD, kBlockQ, kThreads>(sq, b.q + b.q_start * b.q_stride, b.q_stride,
                                          b.span.q_len - b.q_start);
  auto load_kv = [&](int tile, int stage) {
    const int64_t j0 = (tiles.tile_begin + tile) * kBlockK;
    const int64_t valid = b.span.k_len - j0;
    LoadTileSw128<T, kD, kBlockK, kThreads>(sk + stage * kTileBytes, b.k + j0 * b.kv_stride,
                                            b.kv_stride, valid);
    LoadTileSw128<T, kD, kBlockK, kThreads>(sv + stage * kTileBytes, b.v + j0 * b.kv_stride,
                                            b.kv_stride, valid);
  };
  // A software pipeline over key tiles: iteration `it` issues S_it = Q K_it^T and behind it
  // O += P_(it-1) V_(it-1); the softmax of S_it runs while that product is on the tensor cores,
  // and O takes its rescale once the product has landed (an extra iteration finishes the last
  // tile). Tile it + kAhead is loaded into the stage that tile it - 2 used: no warpgroup reads
  // it any more once every thread has passed this iteration's barrier.
  constexpr int kAhead = kStages - 2;
  if constexpr (kWidth != kD) {
    // P V reads V's padding; the loads never write it (the first barrier below orders this).
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      ZeroPadColumns<kD, kWidth, kBlockK, kThreads>(sv + s * kTileBytes);
    }
  }
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < tiles.num_tiles) load_kv(s, s);
    CommitCopies();
  }

  float o[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  // This warpgroup's 64 rows of Q: column block c at q_rows + c * kBlockQ * 128.
  const uint32_t q_rows = sq + warpgroup * 64 * 128;
  float s[kSTiles][4];
  uint32_t pa[kBlockK / 16][4];  // P of the previous tile as the A operand of P V
  float alpha[2];

  // Waits for tile `it`, then starts loading tile it + kAhead (one commit group a tile).
  auto next_tile = [&](int it) {
    WaitCopies<kAhead - 1>();
    FenceProxyAsync();
    __syncthreads();
    if (it + kAhead < tiles.num_tiles) load_kv(it + kAhead, (it + kAhead) % kStages);
    CommitCopies();
  };
  auto issue_s = [&](int it) {
    IssueQkT<kBf16, kD, kBlockQ, kBlockK>(s, q_rows, sk + (it % kStages) * kTileBytes);
  };
  auto issue_pv = [&](int it) {
    IssuePv<kBf16, kWidth, kBlockK>(o, pa, sv + (it % kStages) * kTileBytes);
  };
  // Mask and softmax of tile `it`'s S, once it has landed.
  auto softmax = [&](int it) {
    FenceRegisters(s);
    const int64_t j0 = (tiles.tile_begin + it) * kBlockK;
    bool full = j0 + kBlockK - 1 <= tiles.first_hi && j0 >= tiles.last_lo;
    if (has_segments && full) {
      full = SegmentsUniform<kBlockK>(p, b.span, b.seq, rows, j0, lane);
    }
    MaskLogits(s, p, b.span, b.seq, b.head, rows, j0, full, t);
    SoftmaxProbabilities(s, m, l, alpha);
  };
  auto to_operand = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) ProbabilityFragment<kBf16>(s, kk, pa[kk]);
  };

  if (tiles.num_tiles > 0) {
    next_tile(0);
    WgmmaFence();
    issue_s(0);
    WgmmaWait<0>();
    softmax(0);  // O is still zero: no rescale
    to_operand();
    for (int it = 1; it < tiles.num_tiles; ++it) {
      next_tile(it);
      WgmmaFence();
      issue_s(it);
      issue_pv(it - 1);
      WgmmaWait<1>();  // S has landed; P V of the previous tile may still run
      softmax(it);
      WgmmaWait<0>();
      FenceRegisters(o);
      FenceRegisters(pa);
      RescaleRows(o, alpha);
      to_operand();
    }
    WgmmaFence();
    issue_pv(tiles.num_tiles - 1);
    WgmmaWait<0>();
    FenceRegisters(o);
    FenceRegisters(pa);
  }
  WaitCopies<0>();
  StoreRows<T, kBf16, kD>(p, b.span, b.seq, b.head, rows,
                          reinterpret_cast<const float(&)[kD / 8][4]>(o), m, l, t);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWgmma(const FlashDeviceArgs& args, cudaStream_t stream) {
  return flash::LaunchFlashKernel(
      &flash::FlashWgmmaKernel<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages>, args, kBlockQ,
      kWarps * 32, flash::WgmmaSharedBytes(kHeadDim, kBlockQ, kBlockK, kStages), stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WGMMA_CUH_
