// The guard of system regions' mappings against their objects shrinking under a call. A client
// may ftruncate a registered shm object at any time; a later access to a mapped page past the
// object's new end raises SIGBUS, whose default action ends the process. The server checks an
// object's size before each call uses it (SharedRegion::CheckObject), and this guard covers the
// race after that check: a process-wide SIGBUS handler that, for a fault inside a watched
// mapping, maps anonymous zero pages over the rest of the mapping from the faulting page on (so
// that the access completes) and marks the mapping damaged. A SIGBUS anywhere else goes to the
// handler installed before (or the default action: the process ends, as it would without the
// guard).
#ifndef KERNELSERVE_SERVER_REGION_GUARD_H_
#define KERNELSERVE_SERVER_REGION_GUARD_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace kernelserve::server {

// How many mappings the guard watches at once, in the whole process (a fixed table, so that the
// signal handler needs no lock and no allocation): registered system regions and those that
// calls still hold after they were unregistered.
inline constexpr int kMaxGuardedMappings = 16384;

// Watches one mapping from construction to destruction (or reset). A move-only value; an empty
// guard (default-constructed or moved from) watches nothing.
// Thread safety: damaged() may be called from any thread; the rest from one thread at a time.
class MappingGuard {
 public:
  MappingGuard() = default;
  // Installs the process's SIGBUS handler (once) and watches the `bytes` bytes at `begin`
  // (rounded out to whole pages). ResourceExhausted when kMaxGuardedMappings are watched;
  // Internal when the handler cannot be installed. REQUIRES: [begin, begin + bytes) is a live
  // mapping of this process, unmapped only after the guard stops watching it.
  static absl::StatusOr<MappingGuard> Watch(const void* begin, size_t bytes);
  // Stops watching.
  ~MappingGuard() { Reset(); }
  MappingGuard(MappingGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  MappingGuard& operator=(MappingGuard&& other) noexcept;
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  // Stops watching now (before the mapping is unmapped).
  void Reset();
  // True when watching a mapping.
  bool watching() const { return slot_ >= 0; }
  // True once a fault inside the mapping was covered with zero pages: from the faulting page on,
  // the mapping no longer shows the object.
  bool damaged() const;

 private:
  explicit MappingGuard(int slot) : slot_(slot) {}

  int slot_ = -1;  // index in the process's table; -1 = none
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_REGION_GUARD_H_
