// From runtime values (dtype, head dim, config) to a compiled flash attention backward
// launcher.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DISPATCH_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DISPATCH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"

namespace kernelserve::cuda {

using FlashBwdLaunchFn = cudaError_t (*)(const FlashBwdDeviceArgs& args, cudaStream_t stream);

// The compiled LaunchFlashAttentionBwdMma or LaunchFlashAttentionBwdWgmma instance for these
// values (config's algorithm, block_q and block_k; its other fields are not looked at).
// Unimplemented naming the values when none was compiled (see flash_attention_bwd_instances.h).
// Thread-safe.
absl::StatusOr<FlashBwdLaunchFn> SelectFlashBwdLaunch(DType dtype, int64_t head_dim,
                                                      const KernelConfig& config);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_DISPATCH_H_
