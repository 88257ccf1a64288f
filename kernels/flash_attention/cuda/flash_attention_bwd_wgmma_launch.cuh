// The launcher of the Hopper flash attention backward (flash_attention_bwd_wgmma.cuh): the
// workspaces cleared, D = rowsum(dout * out), the kernel, then the fp32 sums rounded into dq
// (and dk, dv where the group is split). Included by the per-head-dim .cu files.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_LAUNCH_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_LAUNCH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_bwd_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_wgmma.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_wgmma_block.cuh"

namespace kernelserve::cuda::flash {

// out = scale * accum, rounded to T: four values a thread, i counting them in out's order
// ([rows, heads, kD]; accum is [heads, rows, kD], swizzled as dq_accum).
template <typename T, int kD>
__global__ void __launch_bounds__(256)
    FlashBwdRoundKernel(const float* accum, void* out, int64_t heads, int64_t rows, float scale) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * (kD / 4)) return;
  const int64_t row = i / (heads * (kD / 4));
  const int64_t head = i / (kD / 4) % heads;
  const int64_t col4 = i % (kD / 4);
  const float4 v = reinterpret_cast<const float4*>(
      accum)[(head * rows + row) * (kD / 4) + DqAccumColumn(row, 4 * col4) / 4];
  uint2 packed;
  packed.x = Pack<kBf16>(v.x * scale, v.y * scale);
  packed.y = Pack<kBf16>(v.z * scale, v.w * scale);
  reinterpret_cast<uint2*>(out)[i] = packed;
}

// Launches FlashBwdRoundKernel over `heads` x `rows` rows of kD values.
template <typename T, int kD>
cudaError_t LaunchFlashBwdRound(const float* accum, void* out, int64_t heads, int64_t rows,
                                float scale, cudaStream_t stream) {
  const int64_t blocks = (rows * heads * (kD / 4) + 255) / 256;
  if (blocks == 0) return cudaSuccess;
  if (blocks > 2147483647) return cudaErrorInvalidConfiguration;
  FlashBwdRoundKernel<T, kD>
      <<<static_cast<unsigned>(blocks), 256, 0, stream>>>(accum, out, heads, rows, scale);
  return cudaGetLastError();
}

// Zeroes the wgmma kernel's workspaces (and dK, dV rows no sequence covers, unless the group is
// split: the rounding kernel then writes every row).
template <typename T, int kD, int kBlockQ, int kBlockK>
cudaError_t ClearFlashBwdWgmmaWorkspaces(const FlashBwdDeviceArgs& args, cudaStream_t stream) {
  const FlashDeviceArgs& p = args.fwd;
  const bool split = FlashBwdGroupSplit(p) > 1;
  const size_t q_bytes = static_cast<size_t>(p.total_q * p.num_heads_q) * kD * sizeof(float);
  const size_t k_values = static_cast<size_t>(p.total_k * p.num_heads_kv) * kD;
  cudaError_t error = cudaMemsetAsync(args.dq_accum, 0, q_bytes, stream);
  if (error == cudaSuccess && args.dq_locks != nullptr) {
    error = cudaMemsetAsync(args.dq_locks, 0, FlashBwdLockCount(p, kBlockQ) * sizeof(int), stream);
  }
  if (error == cudaSuccess && split) {
    error = cudaMemsetAsync(args.dkv_accum, 0, 2 * k_values * sizeof(float), stream);
  }
  if (error == cudaSuccess && split && args.dkv_locks != nullptr) {
    error = cudaMemsetAsync(args.dkv_locks, 0, FlashBwdKvLockCount(args, kBlockK) * sizeof(int),
                            stream);
  }
  if (error == cudaSuccess && !split && p.cu_seqlens_q != nullptr) {
    // Key rows no sequence covers: zero gradients.
    if ((error = cudaMemsetAsync(args.dk, 0, k_values * sizeof(T), stream)) == cudaSuccess) {
      error = cudaMemsetAsync(args.dv, 0, k_values * sizeof(T), stream);
    }
  }
  return error;
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK>
cudaError_t LaunchFlashAttentionBwdWgmma(const FlashBwdDeviceArgs& args, cudaStream_t stream) {
  const FlashDeviceArgs& p = args.fwd;
  cudaError_t error = flash::CheckFlashArgs(p);
  if (error != cudaSuccess) return error;
  const int64_t split = FlashBwdGroupSplit(p);
  if (args.dq_accum == nullptr || (split > 1 && args.dkv_accum == nullptr) ||
      (split > 1 && (args.dq_locks == nullptr) != (args.dkv_locks == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if ((error = flash::ClearFlashBwdWgmmaWorkspaces<T, kHeadDim, kBlockQ, kBlockK>(args, stream)) !=
      cudaSuccess) {
    return error;
  }
  bool done = false;
  if ((error = flash::LaunchFlashBwdDot<T, kHeadDim>(args, stream, done)) != cudaSuccess) {
    return error;
  }
  dim3 key_grid;
  if ((error = flash::FlashBwdKeyGrid(args, kBlockK, key_grid)) != cudaSuccess) return error;
  if (key_grid.y * split > 65535) return cudaErrorInvalidConfiguration;
  key_grid.y *= static_cast<unsigned>(split);
  if (key_grid.x > 0 && !done) {
    auto* kernel = &flash::FlashBwdWgmmaKernel<T, kHeadDim, kBlockQ, kBlockK>;
    const size_t shared = FlashBwdWgmmaSharedBytes(kHeadDim, kBlockQ, kBlockK);
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (error != cudaSuccess) return error;
    kernel<<<key_grid, flash::kBwdThreads, shared, stream>>>(args);
    if ((error = cudaGetLastError()) != cudaSuccess) return error;
  }
  if (split > 1) {  // dK and dV from the parts' sums (zeros where no query sees a key)
    const int64_t k_values = p.total_k * p.num_heads_kv * kHeadDim;
    if ((error = flash::LaunchFlashBwdRound<T, kHeadDim>(args.dkv_accum, args.dk, p.num_heads_kv,
                                                         p.total_k, 1.0f, stream)) != cudaSuccess ||
        (error = flash::LaunchFlashBwdRound<T, kHeadDim>(
             args.dkv_accum + k_values, args.dv, p.num_heads_kv, p.total_k, 1.0f, stream)) !=
            cudaSuccess) {
      return error;
    }
  }
  if ((error = flash::LaunchFlashBwdRound<T, kHeadDim>(args.dq_accum, args.dq, p.num_heads_q,
                                                       p.total_q, p.softmax_scale, stream)) !=
          cudaSuccess ||
      done || args.dbias == nullptr) {
    return error;
  }
  return flash::LaunchFlashBwdDbias<T, kHeadDim>(args, stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_LAUNCH_CUH_
