// The CPU platform of mean_pooling_bwd: the reference implementation (MeanPoolingBwdCpu), its
// configs and runs.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_CPU_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_CPU_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// Configs: block_size (rows of dx per work item, 0 = 64) and threads (the named field: worker
// threads, 0 = one per hardware thread). Heuristic: 64 rows; one thread below 2^18 elements of dx,
// else every hardware thread. Candidates: block_size in {64, 512} x threads in {1, 2, hardware
// threads}. Runs every problem of the contract; never reads x.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCpu();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_CPU_H_
