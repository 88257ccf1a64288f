// LaunchFlashWsSchedule: the work counter of the persistent forward kernel, and for varlen the
// prefix sums of the sequences' query tiles that number its work items.
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

}  // namespace

cudaError_t LaunchFlashWsSchedule(const FlashDeviceArgs& args, int block_q,
                                  unsigned long long* counter, int64_t* prefix,
                                  cudaStream_t stream) {
  FlashWsScheduleKernel<<<1, kScheduleThreads, 0, stream>>>(args.cu_seqlens_q, args.num_sequences,
                                                            block_q, counter, prefix);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda
