// The CUDA platform of paged attention: MakePagedAttentionCuda.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CUDA_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CUDA_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// The split-KV paged attention kernels (paged_attention_launch.h) for f16 and bf16 with D 64,
// 128 or 256 and pages of any size, configs and heuristic of paged_attention_config.h. A
// launch appends (when k, v are given) into the caches, then attends; caches that are memory
// of the run's GPU (resident tensors) are written in place, others are the run's own copies.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakePagedAttentionCuda();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CUDA_H_
