#include "kernels/runtime/cpu/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/runtime/cpu/checks.h"

namespace kernelserve::cpu {
namespace {

TEST(CpuWorkerCountTest, NeverMoreThanTheItemsOrTheHardware) {
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(CpuWorkerCount(0, 1 << 20), hardware);
  EXPECT_EQ(CpuWorkerCount(1, 1 << 20), 1);
  EXPECT_EQ(CpuWorkerCount(kMaxCpuThreads, 1 << 20), hardware);
  EXPECT_EQ(CpuWorkerCount(1 << 30, 3), std::min(hardware, 3));
  EXPECT_EQ(CpuWorkerCount(8, 0), 1);
}

TEST(ParallelForTest, RunsEveryItemOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t items : {0, 1, 5, 1000}) {
      SCOPED_TRACE(testing::Message() << "threads=" << threads << " items=" << items);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
      std::atomic<int> bad_worker{0};
      ParallelFor(items, threads, [&](int worker, int64_t item) {
        if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
        hits[static_cast<size_t>(item)].fetch_add(1);
      });
      EXPECT_EQ(bad_worker.load(), 0);
      for (int64_t i = 0; i < items; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ParallelForTest, UsesSeveralThreadsAndWorkerIdsAreExclusive) {
  // 64 items of 200 us each on 4 workers: more than one OS thread must show up, and a worker
  // id is never used by two items at the same time (per-worker scratch relies on it).
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::vector<std::atomic<int>> in_use(4);
  std::atomic<int> overlap{0};
  ParallelFor(64, 4, [&](int worker, int64_t) {
    if (in_use[static_cast<size_t>(worker)].fetch_add(1) != 0) overlap.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    in_use[static_cast<size_t>(worker)].fetch_sub(1);
  });
  EXPECT_EQ(overlap.load(), 0);
  EXPECT_GE(ids.size(), 2u);
}

}  // namespace
}  // namespace kernelserve::cpu
