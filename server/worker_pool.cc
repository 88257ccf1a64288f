#include "server/worker_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/utils/log.h"

namespace kernelserve::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Why `item` must not start now; OK when it may.
absl::Status DropReason(const WorkItem& item) {
  if (std::chrono::system_clock::now() > item.deadline) {
    return absl::DeadlineExceededError("the deadline passed while the request was queued");
  }
  if (item.cancelled && item.cancelled()) {
    return absl::CancelledError("the call was cancelled while the request was queued");
  }
  return absl::OkStatus();
}

// Runs `item` with `status`. Work items finish their calls themselves and must not throw;
// should one throw all the same, the exception ends here, on the worker or submitting thread,
// rather than terminating the process, and the pool's counts stay right.
void RunItem(WorkItem& item, absl::Status status, int64_t queue_us) {
  try {
    item.run(std::move(status), queue_us);
  } catch (const std::exception& e) {
    KS_LOG(ERROR) << "kernelserve-server: a work item threw: " << e.what();
  } catch (...) {
    KS_LOG(ERROR) << "kernelserve-server: a work item threw a non-standard exception";
  }
}

}  // namespace

WorkerPool::WorkerPool(const std::vector<int>& devices, WorkerPoolOptions options)
    : options_(std::move(options)) {
  for (int device : devices) {
    auto worker = std::make_unique<Worker>();
    worker->device = device;
    worker->lanes = device < 0 ? 1 : std::max(1, options_.gpu_lanes);
    workers_.emplace(device, std::move(worker));
  }
  for (auto& [device, worker] : workers_) {
    for (int lane = 0; lane < worker->lanes; ++lane) {
      worker->threads.emplace_back([this, w = worker.get()] { Loop(w); });
    }
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::Submit(int device, WorkItem item) {
  auto it = workers_.find(device);
  if (it == workers_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device, " is not served by this server"));
  }
  Worker& worker = *it->second;
  bool run_here = false;
  {
    absl::MutexLock lock(&worker.mu);
    if (worker.stopping) return absl::UnavailableError("the server is shutting down");
    if (item.may_run_inline && device == -1 && worker.queue.empty() && worker.running == 0) {
      run_here = true;
      ++worker.running;
      ++worker.active;
    } else if (static_cast<int>(worker.queue.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat("the queue of device ", device, " is full (",
                                                       options_.max_queue, " requests waiting)"));
    } else {
      worker.queue.emplace_back(std::move(item), SteadyClock::now());
    }
    ReportDepthLocked(worker);
  }
  if (run_here) {
    if (options_.on_start) options_.on_start(device, 0);
    RunItem(item, DropReason(item), 0);
    absl::MutexLock lock(&worker.mu);
    --worker.running;
    --worker.active;
    ReportDepthLocked(worker);
  }
  return absl::OkStatus();
}

int WorkerPool::Place(const std::vector<int>& candidates) const {
  std::vector<int> owned;
  for (int device : candidates) {
    if (Owns(device)) owned.push_back(device);
  }
  if (owned.empty()) return candidates.front();
  // Start at a rotating place, so that ties (equally idle GPUs) go round robin.
  const size_t n = owned.size();
  const size_t start = static_cast<size_t>(next_place_.fetch_add(1, std::memory_order_relaxed) % n);
  int best = owned[start];
  int best_depth = Depth(best);
  for (size_t i = 1; i < n; ++i) {
    const int device = owned[(start + i) % n];
    const int depth = Depth(device);
    if (depth < best_depth) {
      best = device;
      best_depth = depth;
    }
  }
  return best;
}

WorkerPool::Worker* WorkerPool::Find(int device) const {
  auto it = workers_.find(device);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::unique_ptr<ExclusiveHold> WorkerPool::HoldExclusive(int device) {
  Worker* worker = Find(device);
  if (worker == nullptr) return nullptr;
  absl::MutexLock lock(&worker->mu);
  // The caller stops counting as active while it waits, so that two items asking at once both
  // see the other lanes drain and take the hold in turn.
  --worker->active;
  ++worker->hold_waiters;
  auto alone = [worker]()
                   ABSL_NO_THREAD_SAFETY_ANALYSIS { return !worker->held && worker->active == 0; };
  worker->mu.Await(absl::Condition(&alone));
  --worker->hold_waiters;
  worker->held = true;
  ++worker->active;
  return std::unique_ptr<ExclusiveHold>(new ExclusiveHold(worker));
}

ExclusiveHold::~ExclusiveHold() {
  absl::MutexLock lock(&worker_->mu);
  worker_->held = false;
}

// An item of `worker` stepped aside; it counts as active again when destroyed.
class SteppedAside final : public DeviceHold {
 public:
  explicit SteppedAside(WorkerPool::Worker* worker) : worker_(worker) {}
  ~SteppedAside() override {
    absl::MutexLock lock(&worker_->mu);
    auto unheld = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !worker_->held; };
    worker_->mu.Await(absl::Condition(&unheld));
    ++worker_->active;
  }

 private:
  WorkerPool::Worker* const worker_;
};

std::unique_ptr<DeviceHold> WorkerPool::StepAside(int device) {
  Worker* worker = Find(device);
  if (worker == nullptr) return nullptr;
  absl::MutexLock lock(&worker->mu);
  --worker->active;
  return std::make_unique<SteppedAside>(worker);
}

int WorkerPool::Depth(int device) const {
  const Worker* worker = Find(device);
  if (worker == nullptr) return 0;
  absl::MutexLock lock(&worker->mu);
  return static_cast<int>(worker->queue.size()) + worker->running;
}

std::vector<int> WorkerPool::devices() const {
  std::vector<int> out;
  for (const auto& [device, worker] : workers_) out.push_back(device);
  return out;
}

void WorkerPool::Shutdown() {
  for (auto& [device, worker] : workers_) {
    absl::MutexLock lock(&worker->mu);
    worker->stopping = true;
  }
  for (auto& [device, worker] : workers_) {
    for (std::thread& thread : worker->threads) {
      if (thread.joinable()) thread.join();
    }
  }
}

void WorkerPool::ReportDepthLocked(const Worker& worker) const {
  // Under the lock, so that reports of one device reach the gauge in the order of the changes.
  if (options_.on_depth) {
    options_.on_depth(worker.device, static_cast<int>(worker.queue.size()) + worker.running);
  }
}

void WorkerPool::Loop(Worker* worker) {
  // An item starts when a lane is free and no hold is granted or awaited (an item run inline
  // on a submitting thread fills the CPU's one lane).
  auto ready = [worker]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const bool may_start =
        worker->active < worker->lanes && !worker->held && worker->hold_waiters == 0;
    return (!worker->queue.empty() && may_start) || (worker->stopping && worker->queue.empty());
  };
  while (true) {
    WorkItem item;
    SteadyClock::time_point queued_at;
    {
      absl::MutexLock lock(&worker->mu);
      worker->mu.Await(absl::Condition(&ready));
      if (worker->queue.empty()) return;  // stopping and drained
      item = std::move(worker->queue.front().first);
      queued_at = worker->queue.front().second;
      worker->queue.pop_front();
      ++worker->running;
      ++worker->active;
    }
    const int64_t queue_us =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - queued_at)
            .count();
    if (options_.on_start) options_.on_start(worker->device, queue_us);
    RunItem(item, DropReason(item), queue_us);
    absl::MutexLock lock(&worker->mu);
    --worker->running;
    --worker->active;
    ReportDepthLocked(*worker);
  }
}

}  // namespace kernelserve::server
