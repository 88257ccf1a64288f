#include "kernels/runtime/cpu/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace kernelserve::cpu {

void ParallelFor(int64_t num_items, int num_threads,
                 absl::FunctionRef<void(int worker, int64_t item)> fn) {
  if (num_items <= 0) return;
  const int workers = static_cast<int>(std::min<int64_t>(std::max(num_threads, 1), num_items));
  if (workers == 1) {
    for (int64_t item = 0; item < num_items; ++item) fn(0, item);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t item = next.fetch_add(1); item < num_items; item = next.fetch_add(1)) {
      fn(worker, item);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  for (int worker = 1; worker < workers; ++worker) {
    try {
      threads.emplace_back(work, worker);
    } catch (const std::system_error&) {
      break;  // the running workers share the remaining items
    }
  }
  work(0);
  for (std::thread& thread : threads) thread.join();
}

absl::Status ParallelForInterruptible(int64_t num_items, int num_threads,
                                      const std::function<absl::Status()>* interrupt,
                                      absl::FunctionRef<void(int worker, int64_t item)> fn) {
  if (interrupt == nullptr || !*interrupt) {
    ParallelFor(num_items, num_threads, fn);
    return absl::OkStatus();
  }
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  absl::Status first;  // guarded by mu
  ParallelFor(num_items, num_threads, [&](int worker, int64_t item) {
    if (stop.load(std::memory_order_relaxed)) return;
    absl::Status status = (*interrupt)();
    if (!status.ok()) {
      absl::MutexLock lock(&mu);
      if (first.ok()) first = std::move(status);
      stop.store(true, std::memory_order_relaxed);
      return;
    }
    fn(worker, item);
  });
  absl::MutexLock lock(&mu);
  return first;
}

}  // namespace kernelserve::cpu
