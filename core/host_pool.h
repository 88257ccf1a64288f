// A bounded pool of large host buffers from an injected allocation function: the CUDA platform
// gives it cudaHostAlloc, so that request bytes are parsed, and outputs downloaded, straight
// into page-locked memory that the GPU reaches by DMA. Allocating page-locked memory costs
// far more than a copy (the kernel locks every page), so freed buffers are kept for reuse.
#ifndef KERNELSERVE_CORE_HOST_POOL_H_
#define KERNELSERVE_CORE_HOST_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/host_buffer.h"

namespace kernelserve {

struct HostPoolOptions {
  // Most bytes the pool holds at once, in use and cached together (blocks are rounded up to
  // kHostPoolGranule). 0: the pool gives nothing.
  size_t limit_bytes = 0;
  // Requests for fewer bytes get nullptr: small tensors stay on the heap, where a copy costs
  // less than keeping a block for them.
  size_t min_bytes = size_t{1} << 20;
  // Cached blocks unused for this long are freed by Trim.
  absl::Duration idle_release = absl::Seconds(30);
  // Raw allocation of `bytes` bytes, or nullptr on failure. REQUIRED.
  std::function<void*(size_t bytes)> allocate;
  // Frees what `allocate` returned. REQUIRED.
  std::function<void(void* data)> free;
  // Whether the buffers are page-locked (HostBuffer::pinned).
  bool pinned = true;
};

// Ranges and segments are sizes rounded up to this many bytes.
inline constexpr size_t kHostPoolGranule = size_t{2} << 20;

// What a pool holds, for metrics and tests.
struct HostPoolStats {
  size_t in_use_bytes = 0;  // bytes of segments held by buffers
  size_t cached_bytes = 0;  // bytes of segments kept for reuse (free ranges)
  int64_t hits = 0;         // allocations served from a segment already held
  int64_t allocations = 0;  // segments allocated anew (each one call of `allocate`)
  int64_t refusals = 0;     // requests of min_bytes or more that got nullptr (limit or failure)
  int64_t segments = 0;     // segments held now
};

// A HostAllocator over segments from `options.allocate`. A buffer is a range of a segment:
// TryAllocate takes the smallest free range that fits (best fit, split, so that a freed 1 GB
// segment serves 336 MB and 600 MB calls alike), else allocates a segment of the size asked
// for, first freeing wholly unused segments (least recently used first) when the limit would
// be passed; past the limit it returns nullptr. Released ranges merge with their free
// neighbours, so steady traffic of mixed sizes stops allocating once its peak fits. Only a
// wholly unused segment is freed: a long-held small range keeps its segment, and when free
// space is split so that no range fits and the limit is reached, the request is refused (the
// caller then copies through the heap; `refusals` counts it).
// Buffers may outlive the pool (their segment is freed when its last range is released).
// Thread safety: thread-safe.
class HostBufferPool final : public HostAllocator {
 public:
  explicit HostBufferPool(HostPoolOptions options);
  ~HostBufferPool() override;
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  std::shared_ptr<HostBuffer> TryAllocate(size_t bytes) override;

  // Frees wholly unused segments idle since `now - idle_release` (all unused ones with
  // absl::InfiniteFuture()). Returns the bytes freed.
  size_t Trim(absl::Time now = absl::Now());

  HostPoolStats stats() const;

  struct State;  // shared with the buffers, which may outlive the pool

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_HOST_POOL_H_
