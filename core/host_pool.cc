#include "core/host_pool.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {

struct HostBufferPool::State {
  explicit State(HostPoolOptions o) : options(std::move(o)) {}

  struct Cached {
    void* data;
    absl::Time last_used;
  };

  const HostPoolOptions options;
  mutable absl::Mutex mu;
  // Cached blocks by capacity (several of one capacity possible).
  std::multimap<size_t, Cached> cached ABSL_GUARDED_BY(mu);
  size_t held_bytes ABSL_GUARDED_BY(mu) = 0;  // in use + cached + being allocated
  HostPoolStats stats ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;  // the pool is gone: returned blocks are freed

  // Frees cached blocks, least recently used first, until `bytes` more fit under the limit.
  // The blocks to free are moved to `doomed` (freed by the caller, outside the lock).
  void MakeRoom(size_t bytes, std::vector<void*>* doomed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (held_bytes + bytes > options.limit_bytes && !cached.empty()) {
      auto oldest = cached.begin();
      for (auto it = cached.begin(); it != cached.end(); ++it) {
        if (it->second.last_used < oldest->second.last_used) oldest = it;
      }
      held_bytes -= oldest->first;
      stats.cached_bytes -= oldest->first;
      doomed->push_back(oldest->second.data);
      cached.erase(oldest);
    }
  }

  void Return(void* data, size_t capacity) {
    {
      absl::MutexLock lock(&mu);
      stats.in_use_bytes -= capacity;
      if (!closed) {
        cached.emplace(capacity, Cached{data, absl::Now()});
        stats.cached_bytes += capacity;
        return;
      }
      held_bytes -= capacity;
    }
    options.free(data);
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

std::shared_ptr<HostBuffer> Wrap(const std::shared_ptr<HostBufferPool::State>& state, void* data,
                                 size_t bytes, size_t capacity) {
  return std::make_shared<HostBuffer>(data, bytes, state->options.pinned,
                                      [state, capacity](void* p) { state->Return(p, capacity); });
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
    // The smallest cached block that fits, if it is not more than twice the size.
    auto it = s.cached.lower_bound(capacity);
    if (it != s.cached.end() && it->first / 2 <= capacity) {
      void* data = it->second.data;
      const size_t got = it->first;
      s.cached.erase(it);
      s.stats.cached_bytes -= got;
      s.stats.in_use_bytes += got;
      ++s.stats.hits;
      return Wrap(state_, data, bytes, got);
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
  s.stats.in_use_bytes += capacity;
  ++s.stats.allocations;
  return Wrap(state_, data, bytes, capacity);
}

size_t HostBufferPool::Trim(absl::Time now) {
  State& s = *state_;
  std::vector<void*> doomed;
  size_t freed = 0;
  {
    absl::MutexLock lock(&s.mu);
    const absl::Time cutoff =
        now == absl::InfiniteFuture() ? absl::InfiniteFuture() : now - s.options.idle_release;
    for (auto it = s.cached.begin(); it != s.cached.end();) {
      if (it->second.last_used < cutoff || cutoff == absl::InfiniteFuture()) {
        freed += it->first;
        s.held_bytes -= it->first;
        s.stats.cached_bytes -= it->first;
        doomed.push_back(it->second.data);
        it = s.cached.erase(it);
      } else {
        ++it;
      }
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
