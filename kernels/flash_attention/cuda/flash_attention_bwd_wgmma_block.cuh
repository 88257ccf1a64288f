// What a block of the Hopper flash attention backward kernel (flash_attention_bwd_wgmma.cuh)
// works on and where: its roles and named barriers, its key tile and query items, the layout of
// its shared memory and of the fp32 dQ workspace.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_BLOCK_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_BLOCK_CUH_

#include <cstdint>

#include "kernels/flash_attention/cuda/flash_attention_bwd_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"

namespace kernelserve::cuda::flash {

// The block's roles (threads) and named barriers.
constexpr int kBwdLoaderThreads = 64;     // warps 0-1
constexpr int kBwdConsumerThreads = 256;  // warpgroups 1 and 2
constexpr int kBwdThreads = 128 + kBwdConsumerThreads;
constexpr int kBwdStageThreads = kBwdLoaderThreads + kBwdConsumerThreads;
constexpr int kBwdDqThreads = 32 + kBwdConsumerThreads;
enum BwdBarrier : int {
  kBarStageFull = 1,   // + stage: loaders arrive, consumers sync
  kBarStageEmpty = 3,  // + stage: consumers arrive, loaders sync
  kBarConsumers = 5,   // both consumers' dS^T stored
  kBarDqFull = 6,      // + buffer: consumers arrive, the reducer syncs
  kBarDqEmpty = 8,     // + buffer: the reducer arrives, consumers sync
  kBarTail = 10,       // split group: the reducers are done with shared memory
  kBarKeyHalf = 11,    // + consumer: its dK and dV halves stored to shared memory
};
constexpr int kBwdTailThreads = 64 + kBwdConsumerThreads;

// A block's work: key tile n (kBlockK keys from j0) of kv head kv_head of sequence seq, for
// part `part` of the split group's query heads (FlashBwdGroupSplit; `heads` of them from
// head0), and the `items` query items that may see one of its keys. Item i is query head
// head0 + i / q_tiles, query tile tile0 + i % q_tiles.
struct BwdKeyBlock {
  Span span;
  int64_t seq;
  int64_t kv_head;
  int64_t n;
  int64_t j0;
  int64_t split;
  int64_t part;
  int64_t head0;
  int64_t tile0;
  int q_tiles;
  int items;

  __device__ __forceinline__ int64_t Head(int item) const { return head0 + item / q_tiles; }
  template <int kBlockQ>
  __device__ __forceinline__ int64_t Row0(int item) const {
    return (tile0 + item % q_tiles) * kBlockQ;
  }
};

template <int kBlockQ, int kBlockK>
__device__ __forceinline__ BwdKeyBlock KeyBlockOf(const FlashDeviceArgs& p) {
  BwdKeyBlock b;
  b.seq = blockIdx.z;
  b.split = FlashBwdGroupSplit(p);
  b.kv_head = blockIdx.y / b.split;
  b.part = blockIdx.y % b.split;
  b.span = SpanOf(p, b.seq);
  b.n = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;  // the last key tile first
  b.j0 = b.n * kBlockK;
  const int64_t heads = p.num_heads_q / p.num_heads_kv / b.split;
  b.head0 = (b.kv_head * b.split + b.part) * heads;
  int64_t lo, hi;
  QueryRange(p, b.span, b.j0, min(b.j0 + kBlockK, b.span.k_len) - 1, lo, hi);
  b.tile0 = lo / kBlockQ;
  b.q_tiles = hi >= lo ? static_cast<int>(hi / kBlockQ - b.tile0 + 1) : 0;
  b.items = b.q_tiles * static_cast<int>(heads);
  return b;
}

// Where dq_accum (and a dQ tile in shared memory) keeps column `col` of row `row`: the
// 16-byte chunk col / 4 swizzled by row % 8.
__device__ __forceinline__ int DqAccumColumn(int64_t row, int col) {
  return col ^ (static_cast<int>(row % 8) << 2);
}

// Shared memory of the kernel: the K and V tiles, and two buffers each of the Q and dO tiles,
// lse and D (a stage), the dS^T tile and the fp32 dQ tile (FlashBwdWgmmaSharedBytes).
template <int kD, int kBlockQ, int kBlockK>
struct BwdWgmmaTiles {
  static constexpr uint32_t kQBytes = kBlockQ * kD * 2;
  static constexpr uint32_t kKBytes = kBlockK * kD * 2;
  static constexpr uint32_t kDsBytes = kBlockK * kBlockQ * 2;  // key rows of kBlockQ values
  static constexpr uint32_t kDqBytes = kBlockQ * kD * 4;       // rows of kD floats
  uint32_t k, v, q, dout, ds, dq;  // shared addresses; buffer b of q.. at + b * bytes
  float* lse;                      // buffer b at + b * kBlockQ
  float* dsum;

  __device__ __forceinline__ explicit BwdWgmmaTiles(unsigned char* smem) {
    const uint32_t base = SharedAddress(smem);
    k = base + ((1024 - (base % 1024)) % 1024);
    v = k + kKBytes;
    q = v + kKBytes;
    dout = q + 2 * kQBytes;
    ds = dout + 2 * kQBytes;
    dq = ds + 2 * kDsBytes;
    lse = reinterpret_cast<float*>(smem + (dq + 2 * kDqBytes - base));
    dsum = lse + 2 * kBlockQ;
  }
};

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_BLOCK_CUH_
