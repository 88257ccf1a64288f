// WorkerPool: worker threads per owned device (GPU ordinals and the CPU, -1), each device with a
// bounded queue. The CPU has one worker; a GPU has `gpu_lanes` of them, each with its own CUDA
// stream (the platform's per-thread resources), so that the copies of one call overlap the
// kernel of another. Work that waited past its deadline or whose call was cancelled is dropped
// before it starts.
#ifndef KERNELSERVE_SERVER_WORKER_POOL_H_
#define KERNELSERVE_SERVER_WORKER_POOL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/device.h"

namespace kernelserve::server {

// One unit of work for a device's worker.
struct WorkItem {
  // Work not started by then is dropped with DeadlineExceeded. Default: never.
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // True when the caller gave up; such work is dropped with Cancelled. Empty = never.
  std::function<bool()> cancelled;
  // Runs exactly once on the worker thread: `status` is OK to do the work, or why it was
  // dropped (DeadlineExceeded, Cancelled). `queue_us` is the time spent waiting. REQUIRED.
  // It must not throw (an exception is caught and logged, but its call is then never
  // answered).
  std::function<void(absl::Status status, int64_t queue_us)> run;
  // With this set, Submit may run the item itself, on the submitting thread, when the device
  // is the CPU and its worker is idle (nothing queued or running): small work then skips the
  // hand-off to the worker thread (queue_us 0). The worker starts nothing else meanwhile.
  // Leave it false for work that may take long: it holds the submitting (gRPC) thread.
  bool may_run_inline = false;
};

// Options of the pool. Every field has a default.
struct WorkerPoolOptions {
  int max_queue = 1024;  // queued (not yet started) items per device; more -> ResourceExhausted
  // Items each GPU runs at once, each on its own worker thread (the CPU always runs one): while
  // one computes, another uploads or downloads. Items start in queue order.
  // Values < 1 count as 1.
  int gpu_lanes = 1;
  // Called with (device, depth) whenever a device's depth changes (queued + running), under
  // the device's lock: it must be quick, thread-safe and must not call the pool. Empty = not
  // reported.
  std::function<void(int device, int depth)> on_depth;
  // Called with (device, queue_us) as each item starts or is dropped, outside any lock, on the
  // thread that runs it (0 for an item run inline). Must be quick and thread-safe. Empty = not
  // reported.
  std::function<void(int device, int64_t queue_us)> on_start;
};

// Keeps a device's other items from running while it lives (see WorkerPool::HoldExclusive).
class ExclusiveHold;

// Thread safety: thread-safe.
class WorkerPool {
 public:
  // Starts the worker threads of `devices` (-1 = the CPU: one thread; GPU ordinals:
  // options.gpu_lanes threads each).
  WorkerPool(const std::vector<int>& devices, WorkerPoolOptions options = {});
  // Shutdown(), then joins.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `item` on `device`'s worker (or runs it at once, see WorkItem::may_run_inline).
  // InvalidArgument when the pool has no such device;
  // ResourceExhausted when its queue is full; Unavailable after Shutdown. On error `item.run`
  // is never called.
  absl::Status Submit(int device, WorkItem item);
  // The device among `candidates` that this pool owns with the fewest queued + running items;
  // ties go round robin, so that equally idle GPUs share the work. `candidates.front()` when
  // the pool owns none of them. REQUIRES: candidates non-empty.
  int Place(const std::vector<int>& candidates) const;
  // Gives the calling item `device` to itself, for work whose timing must be its own
  // (autotuning): waits until no other item of the device runs, and starts none until the
  // returned hold is destroyed. Null for a device the pool does not own. Holds of two items of
  // one device are granted one after the other. REQUIRES: called from an item running on
  // `device` (not one run inline); the hold ends before that item does.
  std::unique_ptr<ExclusiveHold> HoldExclusive(int device);
  // Lets the calling item wait on another item of `device` (one tuning the key it needs)
  // without counting as running there, so that the other item's HoldExclusive is granted; when
  // the returned object is destroyed, the item counts again once no hold is granted. Null for a
  // device the pool does not own. REQUIRES: as HoldExclusive.
  std::unique_ptr<DeviceHold> StepAside(int device);
  // Queued + running items of `device`; 0 for a device the pool does not own.
  int Depth(int device) const;
  bool Owns(int device) const { return workers_.contains(device); }
  std::vector<int> devices() const;

  // Refuses new work, runs what is queued, and joins the threads. Idempotent.
  void Shutdown();

 private:
  friend class ExclusiveHold;
  friend class SteppedAside;
  struct Worker {
    int device = -1;
    int lanes = 1;  // items run at once (threads)
    mutable absl::Mutex mu;
    std::deque<std::pair<WorkItem, std::chrono::steady_clock::time_point>> queue
        ABSL_GUARDED_BY(mu);
    int running ABSL_GUARDED_BY(mu) = 0;  // started, not finished (for the depth)
    int active ABSL_GUARDED_BY(mu) = 0;   // running, less those waiting for a hold
    int hold_waiters ABSL_GUARDED_BY(mu) = 0;
    bool held ABSL_GUARDED_BY(mu) = false;  // an ExclusiveHold is granted
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::vector<std::thread> threads;
  };
  // The worker of `device`; null when the pool does not own it.
  Worker* Find(int device) const;
  void Loop(Worker* worker);
  void ReportDepthLocked(const Worker& worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(worker.mu);

  const WorkerPoolOptions options_;
  std::map<int, std::unique_ptr<Worker>> workers_;  // fixed after construction
  mutable std::atomic<uint64_t> next_place_{0};     // where Place starts looking
};

// Ends its exclusive hold of a device when destroyed. Thread safety: as a plain value.
class ExclusiveHold final : public DeviceHold {
 public:
  ~ExclusiveHold() override;
  ExclusiveHold(const ExclusiveHold&) = delete;
  ExclusiveHold& operator=(const ExclusiveHold&) = delete;

 private:
  friend class WorkerPool;
  explicit ExclusiveHold(WorkerPool::Worker* worker) : worker_(worker) {}
  WorkerPool::Worker* const worker_;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_WORKER_POOL_H_
