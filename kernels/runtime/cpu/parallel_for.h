// A small parallel-for over std::thread for the CPU kernels.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_PARALLEL_FOR_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace kernelserve::cpu {

// Calls fn(worker, item) once for every item in [0, num_items), on up to `num_threads` workers
// (the calling thread is worker 0; the others are std::threads joined before return). Items
// are handed out in increasing order from a shared counter, so which worker runs an item
// varies from call to call: results must not depend on it. `worker` is in
// [0, num_threads) and lets the caller keep per-worker scratch. If the system refuses to start
// a thread, the workers already running take over its share.
// REQUIRES: num_threads >= 1; fn is safe to run concurrently for distinct items.
void ParallelFor(int64_t num_items, int num_threads,
                 absl::FunctionRef<void(int worker, int64_t item)> fn);

// ParallelFor that checks `interrupt` (when not null and not empty) before each item: the
// first non-OK status it returns stops every worker from taking more items and is returned
// (items already started finish). OK when every item ran.
absl::Status ParallelForInterruptible(int64_t num_items, int num_threads,
                                      const std::function<absl::Status()>* interrupt,
                                      absl::FunctionRef<void(int worker, int64_t item)> fn);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_PARALLEL_FOR_H_
