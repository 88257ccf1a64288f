// The mean_pooling_bwd kernel: a block writes `rows` rows of dx. It first finds each row's
// sequence and count (shared memory), then its threads write the rows in 16-byte vectors,
// a power-of-two group of threads per row so that narrow rows still use every thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/mean_pooling/cuda/mean_pooling_bwd_launch.h"
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_limits.h"

namespace kernelserve::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float ToFloat(T value) {
  return static_cast<float>(value);
}
template <>
__device__ __forceinline__ float ToFloat(__half value) {
  return __half2float(value);
}
template <>
__device__ __forceinline__ float ToFloat(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float value) {
  return static_cast<T>(value);
}
template <>
__device__ __forceinline__ __half FromFloat(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat(float value) {
  return __float2bfloat16_rn(value);
}

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// The sequence that counts `row`, or -1.
__device__ int64_t SequenceOf(const PoolingBwdDeviceArgs& args, int64_t row) {
  if (args.cu_seqlens != nullptr) {
    // The last offset <= row (empty sequences share offsets; the last of them is the one
    // holding the row).
    int64_t lo = 0;
    int64_t hi = args.num_sequences + 1;  // offsets [lo, hi) left to search
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (args.cu_seqlens[mid] <= row) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return lo < args.num_sequences ? lo : -1;
  }
  if (args.mask != nullptr && args.mask[row] == 0) return -1;
  return row / args.seq_len;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kPoolBwdMaxWarps * 32)
    MeanPoolingBwdKernel(PoolingBwdDeviceArgs args, int rows, int threads_per_row) {
  __shared__ int64_t seq_of[kPoolBwdMaxRows];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows;
  const int64_t left = args.total_rows - first;
  const int count = left < rows ? static_cast<int>(left) : rows;
  for (int r = threadIdx.x; r < count; r += blockDim.x) seq_of[r] = SequenceOf(args, first + r);
  __syncthreads();

  using P = Pack<T, kVec>;
  const int64_t packs = args.hidden / kVec;
  const int lane = threadIdx.x % threads_per_row;
  const int rows_at_once = blockDim.x / threads_per_row;
  if (threadIdx.x >= rows_at_once * threads_per_row) return;  // a block of odd warps
  for (int r = threadIdx.x / threads_per_row; r < count; r += rows_at_once) {
    const int64_t seq = seq_of[r];
    P* out = reinterpret_cast<P*>(args.dx) + (first + r) * packs;
    if (seq < 0) {
      P zero;
#pragma unroll
      for (int i = 0; i < kVec; ++i) zero.v[i] = FromFloat<T>(0.0f);
      for (int64_t c = lane; c < packs; c += threads_per_row) out[c] = zero;
      continue;
    }
    const P* in = reinterpret_cast<const P*>(args.dout) + seq * packs;
    const float divisor = args.counts[seq];
    for (int64_t c = lane; c < packs; c += threads_per_row) {
      const P value = in[c];
      P result;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        result.v[i] = FromFloat<T>(__fdiv_rn(ToFloat(value.v[i]), divisor));
      }
      out[c] = result;
    }
  }
}

}  // namespace

template <typename T, int kVec>
cudaError_t LaunchMeanPoolingBwd(const PoolingBwdDeviceArgs& args, int warps, int rows,
                                 cudaStream_t stream) {
  if (args.total_rows == 0 || args.hidden == 0) return cudaSuccess;
  const int threads = warps * 32;
  // Threads per row: the smallest power of two covering the row's packs, within the block.
  const int64_t packs = args.hidden / kVec;
  int threads_per_row = 1;
  while (threads_per_row * 2 <= threads && threads_per_row < packs) threads_per_row *= 2;
  const int64_t blocks = (args.total_rows + rows - 1) / rows;
  MeanPoolingBwdKernel<T, kVec>
      <<<static_cast<unsigned>(blocks), threads, 0, stream>>>(args, rows, threads_per_row);
  return cudaGetLastError();
}

template cudaError_t LaunchMeanPoolingBwd<float, 4>(const PoolingBwdDeviceArgs&, int, int,
                                                    cudaStream_t);
template cudaError_t LaunchMeanPoolingBwd<float, 1>(const PoolingBwdDeviceArgs&, int, int,
                                                    cudaStream_t);
template cudaError_t LaunchMeanPoolingBwd<__half, 8>(const PoolingBwdDeviceArgs&, int, int,
                                                     cudaStream_t);
template cudaError_t LaunchMeanPoolingBwd<__half, 1>(const PoolingBwdDeviceArgs&, int, int,
                                                     cudaStream_t);
template cudaError_t LaunchMeanPoolingBwd<__nv_bfloat16, 8>(const PoolingBwdDeviceArgs&, int, int,
                                                            cudaStream_t);
template cudaError_t LaunchMeanPoolingBwd<__nv_bfloat16, 1>(const PoolingBwdDeviceArgs&, int, int,
                                                            cudaStream_t);

}  // namespace kernelserve::cuda
