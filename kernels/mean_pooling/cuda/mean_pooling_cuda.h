// The CUDA platform of mean pooling.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CUDA_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CUDA_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// The CUDA implementation of mean_pooling (platform kCuda). It runs every form of the contract
// (dense, masked, varlen) for f32, f16 and bf16 with the configs of cuda/mean_pooling_config.h.
// Each calling thread gets its own stream per device; Prepare uploads through a pinned staging
// buffer into memory from the device's caching pool; Launch times the kernel with CUDA events
// (kernels/runtime/cuda/cuda_run.h). Thread-safe.
std::unique_ptr<PlatformImpl> MakeMeanPoolingCuda();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CUDA_H_
