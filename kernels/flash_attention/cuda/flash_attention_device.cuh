// The flash attention forward kernel for any sm_80+ GPU (mma.sync), included by the per-head-dim
// .cu files.
//
// One block takes 16 * kWarps query rows of one head of one sequence; each warp owns 16 rows
// and keeps their Q fragments and output accumulators in registers. K and V tiles of kBlockK
// rows stream through kStages shared-memory stages filled by cp.async; S = Q K^T and O += P V
// run on the tensor cores (mma.sync m16n8k16, operands through ldmatrix), the softmax is online
// in fp32 in log2 units. Shared-memory rows are swizzled (16-byte chunk c of row r sits at
// c ^ (r % 8)) so that ldmatrix reads are free of bank conflicts. Key tiles no row of the
// block can see are never loaded; tiles that every row sees in full skip the per-element mask.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DEVICE_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda::flash {

__device__ __forceinline__ void LoadMatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LoadMatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b for one m16n8k16 tile with fp32 accumulators.
template <bool kBf16>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Element offset of (row, col) in a swizzled tile of kD columns: 16-byte chunk c of row r sits
// at c ^ (r % 8) within its group of 8 chunks, or c ^ (r % 4) in a last group of 4 (D = 32
// and 96), so a chunk never leaves its row. REQUIRES: col % 8 == 0; kD % 32 == 0.
template <int kD>
__device__ __forceinline__ int Swizzle(int row, int col) {
  constexpr int kWhole = (kD / 8) & ~7;  // chunks in whole groups of 8
  const int chunk = col >> 3;
  const int mask = chunk < kWhole ? 7 : 3;
  return row * kD + ((chunk ^ (row & mask)) << 3);
}

// Starts copying kRows rows of kD values (row r from src + r * stride) into a swizzled tile;
// rows at or past `valid` are zero-filled.
template <typename T, int kD, int kRows, int kThreads>
__device__ __forceinline__ void LoadTile(T* tile, const T* src, int64_t stride, int64_t valid) {
  LoadRows<T, kD, kRows, kThreads>(SharedAddress(tile), src, stride, valid, [](int r, int c) {
    return static_cast<uint32_t>(Swizzle<kD>(r, c) * sizeof(T));
  });
}

template <typename T, int kD, int kBlockQ, int kBlockK, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32) FlashForwardKernel(const FlashDeviceArgs p) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kSTiles = kBlockK / 8;  // n8 tiles of S
  constexpr int kOTiles = kD / 8;       // n8 tiles of O
  constexpr int kDSteps = kD / 16;      // k16 steps of Q K^T
  static_assert(kBlockQ == 16 * kWarps, "each warp owns 16 query rows");
  static_assert(kBlockK % 16 == 0 && kD % 32 == 0, "tiles are multiples of 16, D of 32");
  static_assert(kStages >= 2, "at least two stages");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const sq = reinterpret_cast<T*>(smem);
  T* const sk = sq + kBlockQ * kD;
  T* const sv = sk + kStages * kBlockK * kD;

  const BlockInputs<T> b = BlockInputsOf<T, kD>(p, kBlockQ);
  if (b.q_start >= b.span.q_len) return;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  const KeyTiles tiles = KeyTilesOf(p, b.span, b.q_start, kBlockQ, kBlockK);
  const ThreadRows rows = ThreadRowsOf(b.q_start + warp * 16, lane);
  const bool has_segments = p.q_segment_ids != nullptr;
  const int t = lane % 4;

  LoadTile<T, kD, kBlockQ, kThreads>(sq, b.q + b.q_start * b.q_stride, b.q_stride,
                                     b.span.q_len - b.q_start);
  auto load_kv = [&](int tile, int stage) {
    const int64_t j0 = (tiles.tile_begin + tile) * kBlockK;
    const int64_t valid = b.span.k_len - j0;
    LoadTile<T, kD, kBlockK, kThreads>(sk + stage * kBlockK * kD, b.k + j0 * b.kv_stride,
                                       b.kv_stride, valid);
    LoadTile<T, kD, kBlockK, kThreads>(sv + stage * kBlockK * kD, b.v + j0 * b.kv_stride,
                                       b.kv_stride, valid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles.num_tiles) load_kv(s, s);
    CommitCopies();
  }

  uint32_t qf[kDSteps][4];
  float o[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int it = 0; it < tiles.num_tiles; ++it) {
    WaitCopies<kStages - 2>();
    __syncthreads();
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = ks * 16 + (lane >> 4) * 8;
        LoadMatrix4(qf[ks], SharedAddress(sq + Swizzle<kD>(r, c)));
      }
    }
    if (it + kStages - 1 < tiles.num_tiles) {
      load_kv(it + kStages - 1, (it + kStages - 1) % kStages);
    }
    CommitCopies();

    const int stage = it % kStages;
    const T* const tk = sk + stage * kBlockK * kD;
    const T* const tv = sv + stage * kBlockK * kD;
    const int64_t j0 = (tiles.tile_begin + it) * kBlockK;

    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDSteps; ++ks) {
#pragma unroll
      for (int nb = 0; nb < kSTiles / 2; ++nb) {
        uint32_t b[4];
        const int r = nb * 16 + (lane & 7) + (lane >> 4) * 8;
        const int c = ks * 16 + ((lane >> 3) & 1) * 8;
        LoadMatrix4(b, SharedAddress(tk + Swizzle<kD>(r, c)));
        Mma<kBf16>(s[2 * nb], qf[ks], b[0], b[1]);
        Mma<kBf16>(s[2 * nb + 1], qf[ks], b[2], b[3]);
      }
    }

    bool full = j0 + kBlockK - 1 <= tiles.first_hi && j0 >= tiles.last_lo;
    if (has_segments && full) {
      full = SegmentsUniform<kBlockK>(p, b.span, b.seq, rows, j0, lane);
    }
    MaskLogits(s, p, b.span, b.seq, b.head, rows, j0, full, t);
    OnlineSoftmax(s, o, m, l);

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      uint32_t a[4];
      ProbabilityFragment<kBf16>(s, kk, a);
#pragma unroll
      for (int db = 0; db < kD / 16; ++db) {
        uint32_t b[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = db * 16 + (lane >> 4) * 8;
        LoadMatrix4Trans(b, SharedAddress(tv + Swizzle<kD>(r, c)));
        Mma<kBf16>(o[2 * db], a, b[0], b[1]);
        Mma<kBf16>(o[2 * db + 1], a, b[2], b[3]);
      }
    }
  }
  WaitCopies<0>();
  StoreRows<T, kBf16, kD>(p, b.span, b.seq, b.head, rows, o, m, l, t);
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionMma(const FlashDeviceArgs& args, cudaStream_t stream) {
  return flash::LaunchFlashKernel(
      &flash::FlashForwardKernel<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages>, args, kBlockQ,
      kWarps * 32, FlashSharedBytes(kHeadDim, kBlockQ, kBlockK, kStages), stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DEVICE_CUH_
