// The CPU platform of paged attention: the reference implementation (PagedAttentionCpu), its
// configs and runs.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_CPU_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_CPU_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// Configs: "threads" (worker threads, 0 = one per hardware thread). Heuristic: one thread
// below 2^22 multiply-adds, else every hardware thread. Candidates: threads in {1, 2, hardware
// threads}. Runs every problem of the contract; a launch appends (when k, v are given) into
// the caches it was given, in place, then attends.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakePagedAttentionCpu();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_CPU_H_
