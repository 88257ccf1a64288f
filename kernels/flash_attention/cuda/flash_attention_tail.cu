// LaunchFlashClearTail: the varlen rows that no sequence covers.
#include <cmath>

#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {
namespace {

__global__ void ClearLseTail(float* lse, int64_t total_q, int64_t covered_q, int64_t heads) {
  const int64_t rows = total_q - covered_q;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * heads;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    lse[(i / rows) * total_q + covered_q + i % rows] = -INFINITY;
  }
}

}  // namespace

cudaError_t LaunchFlashClearTail(const FlashDeviceArgs& args, int64_t covered_q, int head_dim,
                                 size_t item_size, cudaStream_t stream) {
  if (covered_q >= args.total_q) return cudaSuccess;
  const size_t row_bytes = static_cast<size_t>(args.num_heads_q * head_dim) * item_size;
  cudaError_t error =
      cudaMemsetAsync(static_cast<char*>(args.out) + covered_q * row_bytes, 0,
                      static_cast<size_t>(args.total_q - covered_q) * row_bytes, stream);
  if (error != cudaSuccess || args.lse == nullptr) return error;
  ClearLseTail<<<64, 256, 0, stream>>>(args.lse, args.total_q, covered_q, args.num_heads_q);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda
