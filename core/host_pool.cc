#include "core/host_pool.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {
namespace {

// One allocation of `options.allocate`, lent out in ranges.
struct Segment {
  char* base = nullptr;
  size_t size = 0;
  size_t used = 0;                // bytes of ranges held by buffers
  std::map<size_t, size_t> free;  // offset -> length; merged, never adjacent
  absl::Time last_used;           // when a range was last released (or the segment made)
};

}  // namespace

struct HostBufferPool::State {
  explicit State(HostPoolOptions o) : options(std::move(o)) {}

  const HostPoolOptions options;
  mutable absl::Mutex mu;
  // std::list: a Segment's address is stable while buffers point into it.
  std::list<Segment> segments ABSL_GUARDED_BY(mu);
  size_t held_bytes ABSL_GUARDED_BY(mu) = 0;  // segments + segments being allocated
  HostPoolStats stats ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;  // the pool is gone: unused segments are freed

  // The smallest free range of `capacity` bytes or more, taken from its start; nullptr when
  // none fits.
  char* TakeBestFit(size_t capacity, Segment** from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Segment* best = nullptr;
    size_t best_offset = 0;
    size_t best_length = SIZE_MAX;
    for (Segment& segment : segments) {
      for (const auto& [offset, length] : segment.free) {
        if (length >= capacity && length < best_length) {
          best = &segment;
          best_offset = offset;
          best_length = length;
        }
      }
    }
    if (best == nullptr) return nullptr;
    best->free.erase(best_offset);
    if (best_length > capacity) best->free.emplace(best_offset + capacity, best_length - capacity);
    best->used += capacity;
    *from = best;
    return best->base + best_offset;
  }

  // Moves wholly unused segments to `doomed` (freed by the caller, outside the lock), least
  // recently used first, until `bytes` more fit under the limit.
  void MakeRoom(size_t bytes, std::vector<void*>* doomed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (held_bytes + bytes > options.limit_bytes) {
      auto oldest = segments.end();
      for (auto it = segments.begin(); it != segments.end(); ++it) {
        if (it->used == 0 && (oldest == segments.end() || it->last_used < oldest->last_used)) {
          oldest = it;
        }
      }
      if (oldest == segments.end()) return;
      Drop(oldest, doomed);
    }
  }

  void Drop(std::list<Segment>::iterator segment, std::vector<void*>* doomed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    held_bytes -= segment->size;
    stats.cached_bytes -= segment->size;
    --stats.segments;
    doomed->push_back(segment->base);
    segments.erase(segment);
  }

  // Gives the range at `data` back to `segment`, merging it with free neighbours.
  void Return(Segment* segment, const char* data, size_t capacity) {
    std::vector<void*> doomed;
    {
      absl::MutexLock lock(&mu);
      size_t offset = static_cast<size_t>(data - segment->base);
      size_t length = capacity;
      auto next = segment->free.lower_bound(offset);
      if (next != segment->free.end() && next->first == offset + length) {
        length += next->second;
        next = segment->free.erase(next);
      }
      if (next != segment->free.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == offset) {
          offset = prev->first;
          length += prev->second;
          segment->free.erase(prev);
        }
      }
      segment->free.emplace(offset, length);
      segment->used -= capacity;
      segment->last_used = absl::Now();
      stats.in_use_bytes -= capacity;
      stats.cached_bytes += capacity;
      if (closed && segment->used == 0) {
        auto it = std::find_if(segments.begin(), segments.end(),
                               [segment](const Segment& s) { return &s == segment; });
        if (it != segments.end()) Drop(it, &doomed);
      }
    }
    for (void* p : doomed) options.free(p);
  }
};

HostBufferPool::HostBufferPool(HostPoolOptions options)
    : state_(std::make_shared<State>(std::move(options))) {}

HostBufferPool::~HostBufferPool() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->closed = true;
  }
  Trim(absl::InfiniteFuture());
}

namespace {

std::shared_ptr<HostBuffer> Wrap(const std::shared_ptr<HostBufferPool::State>& state,
                                 Segment* segment, char* data, size_t bytes, size_t capacity) {
  return std::make_shared<HostBuffer>(data, bytes, state->options.pinned,
                                      [state, segment, capacity](void* p) {
                                        state->Return(segment, static_cast<char*>(p), capacity);
                                      });
}

}  // namespace

std::shared_ptr<HostBuffer> HostBufferPool::TryAllocate(size_t bytes) {
  State& s = *state_;
  if (bytes < s.options.min_bytes || bytes == 0) return nullptr;
  if (bytes > SIZE_MAX - kHostPoolGranule) return nullptr;
  const size_t capacity = (bytes + kHostPoolGranule - 1) / kHostPoolGranule * kHostPoolGranule;
  std::vector<void*> doomed;
  bool reserved = false;
  {
    absl::MutexLock lock(&s.mu);
    Segment* segment = nullptr;
    if (char* data = s.TakeBestFit(capacity, &segment); data != nullptr) {
      s.stats.cached_bytes -= capacity;
      s.stats.in_use_bytes += capacity;
      ++s.stats.hits;
      return Wrap(state_, segment, data, bytes, capacity);
    }
    if (capacity <= s.options.limit_bytes) s.MakeRoom(capacity, &doomed);
    reserved = s.held_bytes + capacity <= s.options.limit_bytes;
    if (reserved) {
      s.held_bytes += capacity;  // held while allocating outside the lock
    } else {
      ++s.stats.refusals;
    }
  }
  for (void* p : doomed) s.options.free(p);
  if (!reserved) return nullptr;
  void* data = s.options.allocate(capacity);
  absl::MutexLock lock(&s.mu);
  if (data == nullptr) {
    s.held_bytes -= capacity;
    ++s.stats.refusals;
    return nullptr;
  }
  Segment& segment = s.segments.emplace_back();
  segment.base = static_cast<char*>(data);
  segment.size = capacity;
  segment.used = capacity;
  segment.last_used = absl::Now();
  s.stats.in_use_bytes += capacity;
  ++s.stats.allocations;
  ++s.stats.segments;
  return Wrap(state_, &segment, segment.base, bytes, capacity);
}

size_t HostBufferPool::Trim(absl::Time now) {
  State& s = *state_;
  std::vector<void*> doomed;
  size_t freed = 0;
  {
    absl::MutexLock lock(&s.mu);
    const bool all = now == absl::InfiniteFuture();
    const absl::Time cutoff = all ? now : now - s.options.idle_release;
    for (auto it = s.segments.begin(); it != s.segments.end();) {
      auto next = std::next(it);
      if (it->used == 0 && (all || it->last_used < cutoff)) {
        freed += it->size;
        s.Drop(it, &doomed);
      }
      it = next;
    }
  }
  for (void* p : doomed) s.options.free(p);
  return freed;
}

HostPoolStats HostBufferPool::stats() const {
  absl::MutexLock lock(&state_->mu);
  return state_->stats;
}

}  // namespace kernelserve
