// WorkerPool's inline path (WorkItem::may_run_inline): small CPU work runs on the submitting
// thread when the CPU worker is idle, and the worker starts nothing else meanwhile.
#include "server/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <new>
#include <stdexcept>
#include <thread>

#include "absl/synchronization/notification.h"
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

}  // namespace
}  // namespace kernelserve::server
