// The CUDA flash attention forward launcher: device pointers and sizes in, one kernel launch on
// a stream. Included by host C++ (the dispatch, the platform, the bench) and by the .cu files.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_LAUNCH_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kernelserve::cuda {

// One call's device buffers, sizes and options. Pointers are borrowed. q/out rows are
// [row, Hq, D] and k/v rows [row, Hkv, D], row-major, 16-byte aligned.
struct FlashDeviceArgs {
  const void* q = nullptr;  // [total_q, Hq, D] of the element type
  const void* k = nullptr;  // [total_k, Hkv, D]
  const void* v = nullptr;  // [total_k, Hkv, D]
  void* out = nullptr;      // [total_q, Hq, D]; rows inside sequences written in full
  // Natural-log log-sum-exp per query row (-inf where no key is seen), or null.
  // Dense: [num_sequences, Hq, seq_len_q]; varlen: [Hq, total_q].
  float* lse = nullptr;
  int64_t total_q = 0;
  int64_t total_k = 0;
  int64_t num_heads_q = 0;   // Hq
  int64_t num_heads_kv = 0;  // Hkv, dividing Hq
  int64_t num_sequences = 0;
  int64_t seq_len_q = 0;  // dense
  int64_t seq_len_k = 0;  // dense
  // Varlen when both are set: num_sequences + 1 valid offsets each.
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_k = nullptr;
  int64_t max_seq_len_q = 0;  // varlen: the longest query sequence (sizes the grid)
  float softmax_scale = 1.0f;
  bool causal = false;
  int64_t window_left = -1;   // -1 = unlimited
  int64_t window_right = -1;  // -1 = unlimited
  float softcap = 0.0f;       // 0 = off
  // Dense only: bias element (b, h, i, j) at bias[b*bias_batch_stride + h*bias_head_stride +
  // i*seq_len_k + j] (stride 0 broadcasts); null = none.
  const float* bias = nullptr;
  int64_t bias_batch_stride = 0;
  int64_t bias_head_stride = 0;
  // Dense only: [num_sequences, seq_len_q] and [num_sequences, seq_len_k], or both null.
  const int64_t* q_segment_ids = nullptr;
  const int64_t* kv_segment_ids = nullptr;
};

// The width (elements) of a tile row in the wgmma kernel's shared memory: the head dim rounded
// up to whole 64-element swizzle blocks (D = 96 takes 128).
__host__ __device__ constexpr int FlashWgmmaWidth(int head_dim) {
  return (head_dim + 63) / 64 * 64;
}

// Shared memory (bytes) one block of a config uses: the Q tile and num_stages K and V tiles of
// 2-byte elements.
constexpr size_t FlashSharedBytes(int head_dim, int block_q, int block_k, int num_stages) {
  return static_cast<size_t>(head_dim) * 2 *
         (static_cast<size_t>(block_q) + 2 * static_cast<size_t>(block_k) * num_stages);
}

// Launch the forward kernel on `stream` and return the launch's error (they do not wait).
// T: __half or __nv_bfloat16. kHeadDim: D. kBlockK key rows per tile, kStages K/V tiles in
// flight. REQUIRES: args.head_dim == kHeadDim; the grid (query tiles x Hq x sequences) within
// the device's limits.
//
// Mma: any sm_80+ GPU; kBlockQ = 16 * kWarps query rows per block (each warp owns 16).
template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionMma(const FlashDeviceArgs& args, cudaStream_t stream);
// Wgmma: Hopper (compute capability 9.0) with the build targeting sm_90a; kBlockQ = 16 * kWarps
// query rows per block, 64 per warpgroup of 4 warps; kHeadDim 64, 96, 128 or 256 (96 is padded
// to 128 in shared memory). Its shared memory is WgmmaSharedBytes(...): FlashSharedBytes of
// the padded head dim + 1024 (alignment).
template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWgmma(const FlashDeviceArgs& args, cudaStream_t stream);
// Ws / WsPp: the persistent warp-specialized Hopper kernel (flash_attention_ws.cuh), same
// requirements as Wgmma; kWarps = 12 (a producer warpgroup and two consumer warpgroups of 64
// query rows), kBlockQ = 128; WsPp has its consumers take turns at the tensor cores. Its
// shared memory is FlashWsSharedBytes(...).
template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWs(const FlashDeviceArgs& args, cudaStream_t stream);
template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWsPp(const FlashDeviceArgs& args, cudaStream_t stream);

// Shared memory of a warp-specialized block: the tiles at the padded head dim, 1024 bytes of
// alignment slack, the mbarriers (two for Q, four per stage, two per consumer warpgroup for
// its bias tiles) and the slot that passes each work item from the producer to the consumers.
constexpr size_t FlashWsSharedBytes(int head_dim, int block_q, int block_k, int num_stages) {
  return FlashSharedBytes(FlashWgmmaWidth(head_dim), block_q, block_k, num_stages) + 1024 +
         8 * (2 + 4 * static_cast<size_t>(num_stages)) + 8 + 16 * static_cast<size_t>(block_q / 64);
}

// Shared memory a warp-specialized block adds for its bias tiles: each consumer's 64 rows of a
// key tile in f32, after the mbarriers at the next multiple of 1024 bytes.
constexpr size_t FlashWsBiasBytes(int block_q, int block_k) {
  return static_cast<size_t>(block_q) * block_k * 4 + 1024;
}

// How the blocks of the persistent warp-specialized kernel find their work items.
struct FlashWsSchedule {
  // Zero at launch; each block takes its next item as gridDim.x + atomicAdd(next, 1), so that
  // blocks that drew short items (causal, varlen) take more. Null: block b takes items b,
  // b + gridDim.x, ... (its share fixed in advance).
  unsigned long long* next = nullptr;
  // Varlen: [num_sequences + 1] prefix sums of the sequences' query tiles, so that the items
  // are exactly the tiles with rows (Hq per tile). Null: the items are every tile up to the
  // longest sequence's, those past a sequence's rows skipped.
  const int64_t* tile_prefix = nullptr;
  // Dense calls with segment ids: [num_sequences, FlashKeyChunks(seq_len_k)], for each chunk of
  // kFlashKeyChunk keys the one positive segment id all of them carry (0: ids differ, or the
  // chunk runs past the keys), so that a consumer learns whether a key tile lies in its rows'
  // segment from one word a chunk. Null: the consumers read the tile's key ids themselves.
  const int64_t* key_chunk_segments = nullptr;
};

// The keys of one entry of FlashWsSchedule::key_chunk_segments, and the entries per sequence.
constexpr int kFlashKeyChunk = 64;
constexpr int64_t FlashKeyChunks(int64_t seq_len_k) {
  return (seq_len_k + kFlashKeyChunk - 1) / kFlashKeyChunk;
}

// The work counter and the tile prefix of a FlashWsSchedule, written on `stream` by one small
// kernel: *counter = 0; when prefix is set, prefix[0] = 0 and prefix[i + 1] = the query tiles
// of block_q rows in sequences 0..i. REQUIRES: counter (8 bytes) and prefix
// (num_sequences + 1 values, or null) in device memory; args.cu_seqlens_q set when prefix is.
cudaError_t LaunchFlashWsSchedule(const FlashDeviceArgs& args, int block_q,
                                  unsigned long long* counter, int64_t* prefix,
                                  cudaStream_t stream);

// FlashWsSchedule::key_chunk_segments of args.kv_segment_ids, written to `chunks` on `stream`.
// REQUIRES: args.kv_segment_ids set, dense (no cu_seqlens); `chunks` holds num_sequences x
// FlashKeyChunks(seq_len_k) values in device memory.
cudaError_t LaunchFlashKeyChunkSegments(const FlashDeviceArgs& args, int64_t* chunks,
                                        cudaStream_t stream);

// Varlen rows past the last sequence: writes zeros to out rows [covered_q, total_q) (each
// Hq*D elements of `item_size` bytes) and -inf to their lse entries (when lse is set).
cudaError_t LaunchFlashClearTail(const FlashDeviceArgs& args, int64_t covered_q, int head_dim,
                                 size_t item_size, cudaStream_t stream);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_LAUNCH_H_
