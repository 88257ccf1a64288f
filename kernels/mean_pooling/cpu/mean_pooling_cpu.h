// The CPU platform of mean pooling: the reference implementation (MeanPoolingCpu), its configs
// and runs.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// Configs: block_size (rows per work item, 0 = chunk_size) and num_warps (threads, 0 = one
// per hardware thread), within the limits of kernels/runtime/cpu/checks.h.
// Heuristic: block_size = chunk_size; one thread below 2^18 elements of x, else every hardware
// thread. Candidates: block_size in {chunk_size, 32, 128, 512} x num_warps in {1, 2, hardware
// threads}. Runs every problem of the contract.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeMeanPoolingCpu();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_
