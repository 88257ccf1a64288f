// flash_attention as the registry takes it: the kernel with every platform this build has.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// FlashAttentionKernel (flash_attention_kernel.h) with its cpu platform, and its cuda
// platform in builds with CUDA.
std::unique_ptr<Kernel> MakeFlashAttention();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_H_
