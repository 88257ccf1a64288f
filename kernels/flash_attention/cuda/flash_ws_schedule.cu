// LaunchFlashWsSchedule: the work counter of the persistent forward kernel, and for varlen the
// prefix sums of the sequences' query tiles that number its work items.
// LaunchFlashKeyChunkSegments: the one segment id of each chunk of keys, for the same kernel.
#include <cstdint>

#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {
namespace {

constexpr int kScheduleThreads = 1024;

// Inclusive sum over the 32 lanes of a warp.
__device__ __forceinline__ int64_t WarpInclusiveSum(int64_t value, int lane) {
#pragma unroll
  for (int delta = 1; delta < 32; delta *= 2) {
    const int64_t other = __shfl_up_sync(0xffffffffu, value, delta);
    if (lane >= delta) value += other;
  }
  return value;
}

// One block: zeroes *counter; with a prefix, writes prefix[0] = 0 and prefix[i + 1] = the
// query tiles of block_q rows of sequences 0..i, in chunks of kScheduleThreads sequences.
__global__ void __launch_bounds__(kScheduleThreads)
    FlashWsScheduleKernel(const int64_t* cu_seqlens_q, int64_t num_sequences, int block_q,
                          unsigned long long* counter, int64_t* prefix) {
  __shared__ int64_t warp_sums[kScheduleThreads / 32];
  __shared__ int64_t carry;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  if (threadIdx.x == 0) {
    *counter = 0;
    carry = 0;
    if (prefix != nullptr) prefix[0] = 0;
  }
  if (prefix == nullptr) return;
  __syncthreads();
  for (int64_t base = 0; base < num_sequences; base += kScheduleThreads) {
    const int64_t i = base + threadIdx.x;
    const int64_t rows = i < num_sequences ? cu_seqlens_q[i + 1] - cu_seqlens_q[i] : 0;
    int64_t sum = WarpInclusiveSum((rows + block_q - 1) / block_q, lane);
    if (lane == 31) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) warp_sums[lane] = WarpInclusiveSum(warp_sums[lane], lane);
    __syncthreads();
    sum += carry + (warp > 0 ? warp_sums[warp - 1] : 0);
    if (i < num_sequences) prefix[i + 1] = sum;
    __syncthreads();  // every thread has read carry
    if (threadIdx.x == kScheduleThreads - 1) carry = sum;
    __syncthreads();
  }
}

constexpr int kChunkThreads = 256;

// One warp per chunk of kFlashKeyChunk keys (two a lane): chunks[w] = the id all of chunk w's
// keys carry when it is positive and the chunk lies inside the sequence's keys, else 0.
__global__ void __launch_bounds__(kChunkThreads)
    FlashKeyChunkKernel(const int64_t* kv_segment_ids, int64_t seq_len_k, int64_t per_sequence,
                        int64_t total, int64_t* chunks) {
  static_assert(kFlashKeyChunk == 64, "two keys a lane");
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * kChunkThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (w >= total) return;  // whole warps: every lane of a warp has the same w
  const int64_t key = (w % per_sequence) * kFlashKeyChunk + lane;
  const int64_t* ids = kv_segment_ids + (w / per_sequence) * seq_len_k;
  const bool inside = key + 32 < seq_len_k;
  const int64_t a = inside ? ids[key] : 0;
  const int64_t b = inside ? ids[key + 32] : 0;
  const int64_t id = __shfl_sync(0xffffffffu, a, 0);
  const bool one = __all_sync(0xffffffffu, inside && id > 0 && a == id && b == id);
  if (lane == 0) chunks[w] = one ? id : 0;
}

}  // namespace

cudaError_t LaunchFlashKeyChunkSegments(const FlashDeviceArgs& args, int64_t* chunks,
                                        cudaStream_t stream) {
  const int64_t per_sequence = FlashKeyChunks(args.seq_len_k);
  const int64_t total = args.num_sequences * per_sequence;
  constexpr int64_t kWarpsPerBlock = kChunkThreads / 32;
  const int64_t blocks = (total + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) return cudaSuccess;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  FlashKeyChunkKernel<<<static_cast<unsigned>(blocks), kChunkThreads, 0, stream>>>(
      args.kv_segment_ids, args.seq_len_k, per_sequence, total, chunks);
  return cudaGetLastError();
}

cudaError_t LaunchFlashWsSchedule(const FlashDeviceArgs& args, int block_q,
                                  unsigned long long* counter, int64_t* prefix,
                                  cudaStream_t stream) {
  FlashWsScheduleKernel<<<1, kScheduleThreads, 0, stream>>>(args.cu_seqlens_q, args.num_sequences,
                                                            block_q, counter, prefix);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda
