// paged_attention as the registry takes it: the kernel with every platform this build has.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// PagedAttentionKernel (paged_attention_kernel.h) with its cpu platform, and its cuda platform
// in builds with CUDA.
std::unique_ptr<Kernel> MakePagedAttention();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_H_
