// WorkerPool: the inline path (WorkItem::may_run_inline: small CPU work runs on the submitting
// thread when the CPU worker is idle, and the worker starts nothing else meanwhile), placement,
// a GPU's lanes (several items at once, in queue order) and exclusive holds.
#include "server/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

TEST(WorkerPoolTest, InlineItemRunsOnTheSubmittingThreadWhenTheCpuWorkerIsIdle) {
  WorkerPool pool({-1});
  std::thread::id ran_on;
  int64_t queued_us = -1;
  WorkItem item;
  item.may_run_inline = true;
  item.run = [&](absl::Status status, int64_t queue_us) {
    EXPECT_TRUE(status.ok()) << status;
    ran_on = std::this_thread::get_id();
    queued_us = queue_us;
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(item)).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // done when Submit returns
  EXPECT_EQ(queued_us, 0);
  EXPECT_EQ(pool.Depth(-1), 0);
}

TEST(WorkerPoolTest, ItemsWithoutTheFlagGoToTheWorkerThread) {
  WorkerPool pool({-1});
  absl::Notification done;
  std::thread::id ran_on;
  WorkItem item;
  item.run = [&](absl::Status, int64_t) {
    ran_on = std::this_thread::get_id();
    done.Notify();
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(item)).ok());
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(WorkerPoolTest, BusyWorkerQueuesInlineItemsAndRunsOneAtATime) {
  WorkerPool pool({-1});
  absl::Notification release, first_started, second_done;
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  auto enter = [&] { most = std::max(most.load(), ++running); };
  WorkItem first;  // on the worker thread, held until released
  first.run = [&](absl::Status, int64_t) {
    enter();
    first_started.Notify();
    release.WaitForNotification();
    --running;
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(first)).ok());
  first_started.WaitForNotification();
  std::thread::id second_on;
  WorkItem second;  // the worker is busy: queued, not run here
  second.may_run_inline = true;
  second.run = [&](absl::Status, int64_t) {
    enter();
    second_on = std::this_thread::get_id();
    --running;
    second_done.Notify();
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(second)).ok());
  EXPECT_FALSE(second_done.HasBeenNotified());
  release.Notify();
  second_done.WaitForNotification();
  EXPECT_NE(second_on, std::this_thread::get_id());
  EXPECT_EQ(most.load(), 1);
}

TEST(WorkerPoolTest, WorkerWaitsForAnInlineItemBeforeStartingQueuedWork) {
  WorkerPool pool({-1});
  absl::Notification inline_started, release, queued_done;
  std::atomic<bool> inline_running{false};
  bool overlapped = false;
  std::thread submitter([&] {
    WorkItem item;
    item.may_run_inline = true;
    item.run = [&](absl::Status, int64_t) {
      inline_running = true;
      inline_started.Notify();
      release.WaitForNotification();
      inline_running = false;
    };
    EXPECT_TRUE(pool.Submit(-1, std::move(item)).ok());
  });
  inline_started.WaitForNotification();
  WorkItem queued;
  queued.run = [&](absl::Status, int64_t) {
    overlapped = inline_running.load();
    queued_done.Notify();
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(queued)).ok());
  EXPECT_EQ(pool.Depth(-1), 2);  // one running inline, one queued
  release.Notify();
  queued_done.WaitForNotification();
  submitter.join();
  EXPECT_FALSE(overlapped);
}

// An item that throws (on the submitting thread or the worker's) neither ends the process nor
// leaves the device counted busy: later items run, and inline ones still run inline.
TEST(WorkerPoolTest, ThrowingItemLeavesThePoolWorking) {
  WorkerPool pool({-1});
  WorkItem inline_throw;
  inline_throw.may_run_inline = true;
  inline_throw.run = [](absl::Status, int64_t) { throw std::bad_alloc(); };
  ASSERT_TRUE(pool.Submit(-1, std::move(inline_throw)).ok());
  EXPECT_EQ(pool.Depth(-1), 0);

  absl::Notification thrown;
  WorkItem worker_throw;
  worker_throw.run = [&](absl::Status, int64_t) {
    thrown.Notify();
    throw std::runtime_error("boom");
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(worker_throw)).ok());
  thrown.WaitForNotification();

  absl::Notification ran;
  WorkItem next;
  next.run = [&](absl::Status status, int64_t) {
    EXPECT_TRUE(status.ok()) << status;
    ran.Notify();
  };
  ASSERT_TRUE(pool.Submit(-1, std::move(next)).ok());
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  while (pool.Depth(-1) != 0) std::this_thread::yield();

  std::thread::id ran_on;
  WorkItem small;
  small.may_run_inline = true;
  small.run = [&](absl::Status, int64_t) { ran_on = std::this_thread::get_id(); };
  ASSERT_TRUE(pool.Submit(-1, std::move(small)).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// Equally loaded GPUs share the work (round robin); a busier one is passed over; devices the
// pool does not serve are never picked.
TEST(WorkerPoolTest, PlaceGoesRoundRobinAmongTheLeastLoaded) {
  WorkerPool pool({-1, 0, 1});
  std::map<int, int> picked;
  for (int i = 0; i < 8; ++i) ++picked[pool.Place({0, 1, 7})];
  EXPECT_EQ(picked[0], 4);
  EXPECT_EQ(picked[1], 4);
  EXPECT_EQ(picked.count(7), 0u);

  absl::Notification release, started;
  WorkItem busy;
  busy.run = [&](absl::Status, int64_t) {
    started.Notify();
    release.WaitForNotification();
  };
  ASSERT_TRUE(pool.Submit(0, std::move(busy)).ok());
  started.WaitForNotification();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pool.Place({0, 1}), 1);
  release.Notify();
  EXPECT_EQ(pool.Place({7}), 7);  // none served: the first, for the caller to refuse
}

// Items that block until `release`, counting how many run at once on the device.
struct Gate {
  absl::Mutex mu;
  int running ABSL_GUARDED_BY(mu) = 0;
  int most ABSL_GUARDED_BY(mu) = 0;
  std::vector<int> started ABSL_GUARDED_BY(mu);  // item ids in start order
  absl::Notification release;

  WorkItem Item(int id) {
    WorkItem item;
    item.run = [this, id](absl::Status status, int64_t) {
      EXPECT_TRUE(status.ok()) << status;
      {
        absl::MutexLock lock(&mu);
        ++running;
        most = std::max(most, running);
        started.push_back(id);
      }
      release.WaitForNotification();
      absl::MutexLock lock(&mu);
      --running;
    };
    return item;
  }
  void AwaitRunning(int n) {
    absl::MutexLock lock(&mu);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return running == n; };
    mu.Await(absl::Condition(&reached));
  }
};

// A GPU with three lanes runs three items at once, in queue order; the fourth waits for a lane.
// The CPU keeps one.
TEST(WorkerPoolTest, GpuLanesRunThatManyItemsAtOnceInQueueOrder) {
  WorkerPoolOptions options;
  options.gpu_lanes = 3;
  WorkerPool pool({-1, 0}, options);
  Gate gpu;
  for (int id = 0; id < 5; ++id) ASSERT_TRUE(pool.Submit(0, gpu.Item(id)).ok());
  gpu.AwaitRunning(3);
  EXPECT_EQ(pool.Depth(0), 5);  // 3 running + 2 queued
  {
    absl::MutexLock lock(&gpu.mu);
    std::vector<int> first = gpu.started;
    std::sort(first.begin(), first.end());
    EXPECT_EQ(first, (std::vector<int>{0, 1, 2}));
  }
  Gate cpu;
  for (int id = 0; id < 2; ++id) ASSERT_TRUE(pool.Submit(-1, cpu.Item(id)).ok());
  cpu.AwaitRunning(1);
  gpu.release.Notify();
  cpu.release.Notify();
  pool.Shutdown();
  absl::MutexLock gpu_lock(&gpu.mu);
  absl::MutexLock cpu_lock(&cpu.mu);
  EXPECT_EQ(gpu.most, 3);
  EXPECT_EQ(gpu.started.size(), 5u);
  EXPECT_EQ(cpu.most, 1);
}

// An item holding its GPU exclusively waits until the other lanes' items end, and no item starts
// until the hold ends; then the lanes fill again.
TEST(WorkerPoolTest, ExclusiveHoldWaitsForTheOtherLanesAndKeepsNewItemsOut) {
  WorkerPoolOptions options;
  options.gpu_lanes = 3;
  WorkerPool pool({-1, 0}, options);
  Gate others;
  ASSERT_TRUE(pool.Submit(0, others.Item(0)).ok());
  ASSERT_TRUE(pool.Submit(0, others.Item(1)).ok());
  others.AwaitRunning(2);

  absl::Notification held, end_hold, hold_ended;
  WorkItem tuner;
  tuner.run = [&](absl::Status, int64_t) {
    std::unique_ptr<ExclusiveHold> hold = pool.HoldExclusive(0);
    ASSERT_NE(hold, nullptr);
    {
      absl::MutexLock lock(&others.mu);
      EXPECT_EQ(others.running, 0);  // alone on the device
    }
    held.Notify();
    end_hold.WaitForNotification();
    hold.reset();
    hold_ended.Notify();
  };
  ASSERT_TRUE(pool.Submit(0, std::move(tuner)).ok());
  Gate later;
  ASSERT_TRUE(pool.Submit(0, later.Item(7)).ok());  // queued behind the waiting hold
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(held.HasBeenNotified());  // two items still run
  {
    absl::MutexLock lock(&later.mu);
    EXPECT_TRUE(later.started.empty());  // a waiting hold keeps new items out
  }
  others.release.Notify();
  held.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(50));
  {
    absl::MutexLock lock(&later.mu);
    EXPECT_TRUE(later.started.empty());  // and so does a granted one
  }
  end_hold.Notify();
  later.AwaitRunning(1);
  later.release.Notify();
  pool.Shutdown();
  EXPECT_TRUE(hold_ended.HasBeenNotified());
  EXPECT_EQ(pool.HoldExclusive(5), nullptr);  // not served
}

// Two items asking for a hold at once both get it, one after the other.
TEST(WorkerPoolTest, TwoHoldsOfOneDeviceAreGrantedInTurn) {
  WorkerPoolOptions options;
  options.gpu_lanes = 2;
  WorkerPool pool({0}, options);
  std::atomic<int> holding{0};
  std::atomic<int> most{0};
  std::atomic<int> done{0};
  absl::Notification both_started;
  std::atomic<int> started{0};
  for (int i = 0; i < 2; ++i) {
    WorkItem item;
    item.run = [&](absl::Status, int64_t) {
      if (++started == 2) both_started.Notify();
      both_started.WaitForNotification();  // both running before either asks
      std::unique_ptr<ExclusiveHold> hold = pool.HoldExclusive(0);
      most = std::max(most.load(), ++holding);
      absl::SleepFor(absl::Milliseconds(20));
      --holding;
      hold.reset();
      ++done;
    };
    ASSERT_TRUE(pool.Submit(0, std::move(item)).ok());
  }
  pool.Shutdown();
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(most.load(), 1);
}

}  // namespace
}  // namespace kernelserve::server
