// The CPU platform of mean pooling: the reference implementation (MeanPoolingCpu), its configs
// and runs.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/kernel.h"
#include "kernels/mean_pooling/cpu/mean_pooling.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"

namespace kernelserve {

// Configs: block_size (rows per work item, 0 = chunk_size) and threads (the named field: worker
// threads, 0 = one per hardware thread), within the limits of kernels/runtime/cpu/checks.h.
// Heuristic: block_size = chunk_size; one thread below 2^18 elements of x, else every hardware
// thread. Candidates: block_size in {chunk_size, 32, 128, 512} x threads in {1, 2, hardware
// threads}. Runs every problem of the contract.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeMeanPoolingCpu();

// What the CPU platforms of mean_pooling and mean_pooling_bwd share.
namespace cpu {

// The rows of `p` for the CPU kernels of both directions: dtype, sizes, and the offsets
// (varlen) or mask (masked), pointing into `index`, which must outlive them.
PoolingRowsArgs PoolingRowsOf(const MeanPoolingProblem& p, const MeanPoolingIndex& index);

// A config of the CPU platforms: `block_size` rows per work item on `threads` threads.
KernelConfig PoolingCpuConfig(int block_size, int threads);
// The heuristic's threads: one below 2^18 elements of x, else every hardware thread.
int PoolingCpuThreads(const MeanPoolingProblem& p, const DeviceInfo& device);
// Each of `block_sizes` x threads in {1, 2, hardware threads}.
std::vector<KernelConfig> PoolingCpuCandidates(const std::set<int>& block_sizes,
                                               const DeviceInfo& device);

}  // namespace cpu

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_CPU_H_
