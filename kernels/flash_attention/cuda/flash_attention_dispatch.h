// From runtime values (dtype, head dim, config) to a compiled flash attention launcher.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DISPATCH_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DISPATCH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {

using FlashLaunchFn = cudaError_t (*)(const FlashDeviceArgs& args, cudaStream_t stream);

// The compiled LaunchFlashAttention instance for these values (config's algorithm, '' for
// mma.sync or 'wgmma', block_q, block_k, num_warps and num_stages; its other fields are not
// looked at). Unimplemented naming the values when none was compiled (dtype other than
// f16/bf16, a head dim other than 32, 64, 96, 128 and 256, wgmma where the build does not target
// sm_90a, a config outside kernels/flash_attention/cuda/flash_attention_instances.h).
// Thread-safe.
absl::StatusOr<FlashLaunchFn> SelectFlashLaunch(DType dtype, int64_t head_dim,
                                                const KernelConfig& config);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_DISPATCH_H_
