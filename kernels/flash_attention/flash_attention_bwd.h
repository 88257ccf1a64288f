// flash_attention_bwd as the registry takes it: the kernel with every platform this build has.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// FlashAttentionBwdKernel (flash_attention_bwd_kernel.h) with its cpu platform, in CUDA builds
// its cuda platform and, where cuDNN loads, its cudnn platform
// (cuda/flash_attention_bwd_cuda.h).
std::unique_ptr<Kernel> MakeFlashAttentionBwd();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_H_
