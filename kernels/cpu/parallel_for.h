// A small parallel-for over std::thread for the CPU kernels.
#ifndef KERNELSERVE_KERNELS_CPU_PARALLEL_FOR_H_
#define KERNELSERVE_KERNELS_CPU_PARALLEL_FOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace kernelserve::cpu {

// The worker count a CPU kernel uses for `requested` threads: `requested` when > 0, else the
// hardware thread count (at least 1).
int ResolveNumThreads(int requested);

// Calls fn(worker, item) once for every item in [0, num_items), on up to `num_threads` workers
// (the calling thread is worker 0; the others are std::threads joined before return). Items
// are handed out in increasing order from a shared counter, so which worker runs an item
// varies from call to call: results must not depend on it. `worker` is in
// [0, num_threads) and lets the caller keep per-worker scratch. If the system refuses to start
// a thread, the workers already running take over its share.
// REQUIRES: num_threads >= 1; fn is safe to run concurrently for distinct items.
void ParallelFor(int64_t num_items, int num_threads,
                 absl::FunctionRef<void(int worker, int64_t item)> fn);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_CPU_PARALLEL_FOR_H_
