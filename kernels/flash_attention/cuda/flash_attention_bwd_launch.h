// The CUDA flash attention backward launcher: device pointers and sizes in, three kernel
// launches on a stream (D = rowsum(dout * out), then dK and dV, then dQ). Included by host C++
// (the dispatch, the platform) and by the .cu files.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_LAUNCH_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {

// One backward call's device buffers. Pointers are borrowed; rows as in FlashDeviceArgs.
struct FlashBwdDeviceArgs {
  // The forward's q, k, v, sizes and options; `out` is read (the forward's out) and `lse` read
  // (the forward's, in its layout, finite: a row that sees no key carries a large value, so
  // that its probabilities are 0).
  FlashDeviceArgs fwd;
  const void* dout = nullptr;  // [total_q, Hq, D]
  float* dsum = nullptr;       // workspace, lse's layout: rowsum(dout * out) per row and head
  void* dq = nullptr;          // [total_q, Hq, D]; every row written (zeros where none is)
  void* dk = nullptr;          // [total_k, Hkv, D]
  void* dv = nullptr;          // [total_k, Hkv, D]
  float* dbias = nullptr;      // return_dbias only: bias's dense shape [Bb, Hb, Sq, Sk], f32
  int64_t max_seq_len_k = 0;   // varlen: the longest key sequence (sizes the dK/dV grid)
  // The wgmma kernel's workspaces (unused by the mma.sync kernels). dq_accum: fp32,
  // [Hq, total_q, D], each row's 16-byte chunks swizzled by the row (flash::DqAccumColumn).
  // dq_locks: FlashBwdLockCount ints; null lets the blocks add to dq_accum in any order (the bits
  // may then differ from call to call).
  float* dq_accum = nullptr;
  int* dq_locks = nullptr;
  // Used when the wgmma kernel spreads a group's query heads over blocks
  // (FlashBwdGroupSplit > 1). dkv_accum: fp32 dK then dV, each [Hkv, total_k, D] swizzled as
  // dq_accum. dkv_locks: FlashBwdKvLockCount ints, set with dq_locks (the same order rule).
  float* dkv_accum = nullptr;
  int* dkv_locks = nullptr;
};

// Over how many blocks the wgmma kernel spreads the query heads of one GQA group (each block
// then takes group / split heads, and the blocks add their dK and dV into dkv_accum). A block
// takes a key tile and streams the query tiles that see it; under a causal mask or a window
// that work differs from key tile to key tile, and a block taking all heads of a group
// multiplies the difference: with S = 4096 and a group of 4 a block ran 8 to 256 query tiles
// and the longest ones, started last, set the kernel's end (0.91x torch's flash backward,
// 2026-11-27). One head a block keeps the spread of a plain causal mask. Without a mask every
// block has the same work and the split would only add the sums, so none then.
__host__ __device__ inline int64_t FlashBwdGroupSplit(const FlashDeviceArgs& p) {
  const int64_t group = p.num_heads_kv > 0 ? p.num_heads_q / p.num_heads_kv : 1;
  const bool uneven = p.causal || p.window_left >= 0 || p.window_right >= 0;
  return group > 1 && uneven ? group : 1;
}

// The wgmma kernel's locks with query tiles of `block_q` rows: one per query tile, head and
// sequence, FlashBwdLockTiles a (sequence, head) pair, tile i of head h of sequence n at
// (n * Hq + h) * FlashBwdLockTiles + i.
__host__ __device__ inline int64_t FlashBwdLockTiles(const FlashDeviceArgs& p, int block_q) {
  const int64_t longest = p.cu_seqlens_q != nullptr ? p.max_seq_len_q : p.seq_len_q;
  return (longest + block_q - 1) / block_q;
}
inline size_t FlashBwdLockCount(const FlashDeviceArgs& p, int block_q) {
  return static_cast<size_t>(p.num_sequences * p.num_heads_q * FlashBwdLockTiles(p, block_q));
}

// The key tiles of `block_k` rows of the longest key sequence (the grid's x).
__host__ __device__ inline int64_t FlashBwdKeyTiles(const FlashBwdDeviceArgs& a, int block_k) {
  const int64_t longest = a.fwd.cu_seqlens_k != nullptr ? a.max_seq_len_k : a.fwd.seq_len_k;
  return (longest + block_k - 1) / block_k;
}

// dkv_locks with key tiles of `block_k` rows: two per key tile (a half each consumer), kv head
// and sequence; half c of tile n of kv head h of sequence s at
// ((s * Hkv + h) * FlashBwdKeyTiles + n) * 2 + c.
inline size_t FlashBwdKvLockCount(const FlashBwdDeviceArgs& a, int block_k) {
  return static_cast<size_t>(a.fwd.num_sequences * a.fwd.num_heads_kv *
                             FlashBwdKeyTiles(a, block_k) * 2);
}

// Shared memory (bytes) of the dK/dV kernel (K and V tiles of block_k rows, two stages of Q and
// dO tiles of block_q rows and their lse and D values) and of the dQ kernel (Q and dO tiles of
// block_q rows, two stages of K and V tiles of block_k rows), 2-byte elements.
constexpr size_t FlashBwdDkvSharedBytes(int head_dim, int block_q, int block_k) {
  return static_cast<size_t>(head_dim) * 2 *
             (2 * static_cast<size_t>(block_k) + 4 * static_cast<size_t>(block_q)) +
         4 * sizeof(float) * static_cast<size_t>(block_q);
}
constexpr size_t FlashBwdDqSharedBytes(int head_dim, int block_q, int block_k) {
  return static_cast<size_t>(head_dim) * 2 *
         (2 * static_cast<size_t>(block_q) + 4 * static_cast<size_t>(block_k));
}

// Shared memory (bytes) of the wgmma kernel: K and V tiles of block_k rows, and two buffers
// each of the Q and dO tiles of block_q rows, the dS^T tile, the fp32 dQ tile and lse and D,
// and 1024 bytes of slack to align the tiles. 231424 at D = 128 (the H100 allows 232448).
constexpr size_t FlashBwdWgmmaSharedBytes(int head_dim, int block_q, int block_k) {
  return static_cast<size_t>(head_dim) * 2 *
             (2 * static_cast<size_t>(block_k) + 4 * static_cast<size_t>(block_q)) +
         2 * (2 * static_cast<size_t>(block_k) * block_q +
              sizeof(float) * static_cast<size_t>(block_q) * head_dim) +
         4 * sizeof(float) * block_q + 1024;
}

// Launches the backward on `stream` and returns the first launch error (they do not wait).
// T: __half or __nv_bfloat16; kHeadDim: D (a multiple of 32). The dK/dV kernel runs
// kBlockK / 16 warps, each owning 16 key rows, over query tiles of kBlockQ rows; the dQ
// kernel kBlockQ / 16 warps, each owning 16 query rows, over key tiles of kBlockK rows. Both
// recompute P from q, k and lse (mma.sync m16n8k16, fp32 accumulators), so that no result is
// summed by atomics: the same inputs give the same bits. REQUIRES: args.fwd.bias (when set)
// dense; grids (tiles x heads x sequences) within the device's limits.
template <typename T, int kHeadDim, int kBlockQ, int kBlockK>
cudaError_t LaunchFlashAttentionBwdMma(const FlashBwdDeviceArgs& args, cudaStream_t stream);

// The same on Hopper (sm_90a, compiled where the build targets it) in one kernel for dK, dV
// and dQ (flash_attention_bwd_wgmma.cuh, launched by flash_attention_bwd_wgmma_launch.cuh): kBlockK
// = 128 keys a block (two consumer warpgroups), kBlockQ = 64 query rows a tile, dQ added in fp32 to
// args.dq_accum, in a fixed order when args.dq_locks is set. REQUIRES: as above; args.dq_accum set;
// where FlashBwdGroupSplit > 1, args.dkv_accum set and args.dkv_locks set exactly when
// args.dq_locks is.
template <typename T, int kHeadDim, int kBlockQ, int kBlockK>
cudaError_t LaunchFlashAttentionBwdWgmma(const FlashBwdDeviceArgs& args, cudaStream_t stream);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_LAUNCH_H_
