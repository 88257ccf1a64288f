#include "server/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace kernelserve {

void TuneProcess() {
  mallopt(M_ARENA_MAX, 1);  // a block freed by one thread is reused by the next, whichever
  mallopt(M_MMAP_MAX, 0);   // large blocks come from the heap (reusable), not fresh mappings
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kRetainedFreeBytes));
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

void ReleaseRetainedMemory() { malloc_trim(0); }

}  // namespace kernelserve
