#include "core/host_pool.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Heap blocks standing in for cudaHostAlloc, counted so that leaks and double frees show.
class CountingHeap {
 public:
  HostPoolOptions Options(size_t limit) {
    HostPoolOptions o;
    o.limit_bytes = limit;
    o.allocate = [this](size_t bytes) -> void* {
      if (fail_) return nullptr;
      void* p = std::malloc(bytes);
      absl::MutexLock lock(&mu_);
      live_.insert(p);
      ++allocations_;
      return p;
    };
    o.free = [this](void* p) {
      absl::MutexLock lock(&mu_);
      EXPECT_EQ(live_.erase(p), 1u) << "freed twice or never allocated";
      std::free(p);
    };
    return o;
  }
  size_t live() {
    absl::MutexLock lock(&mu_);
    return live_.size();
  }
  int allocations() {
    absl::MutexLock lock(&mu_);
    return allocations_;
  }
  void set_fail(bool fail) { fail_ = fail; }

 private:
  absl::Mutex mu_;
  std::set<void*> live_ ABSL_GUARDED_BY(mu_);
  int allocations_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_ = false;
};

TEST(HostBufferPoolTest, GivesWritableBuffersOfTheSizeAsked) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  std::shared_ptr<HostBuffer> b = pool.TryAllocate(3 * kMiB + 5);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size(), 3 * kMiB + 5);
  EXPECT_TRUE(b->pinned());
  std::memset(b->data(), 0x5a, b->size());
  EXPECT_EQ(pool.stats().in_use_bytes, 4 * kMiB);  // rounded up to 2 MiB granules
}

TEST(HostBufferPoolTest, SmallRequestsGetNothing) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  EXPECT_EQ(pool.TryAllocate(0), nullptr);
  EXPECT_EQ(pool.TryAllocate(kMiB - 1), nullptr);
  EXPECT_EQ(heap.allocations(), 0);
  EXPECT_EQ(pool.stats().refusals, 0);
}

TEST(HostBufferPoolTest, ReleasedBlocksAreReused) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  void* first = nullptr;
  {
    std::shared_ptr<HostBuffer> b = pool.TryAllocate(8 * kMiB);
    ASSERT_NE(b, nullptr);
    first = b->data();
  }
  EXPECT_EQ(pool.stats().cached_bytes, 8 * kMiB);
  std::shared_ptr<HostBuffer> again = pool.TryAllocate(7 * kMiB);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(heap.allocations(), 1);
  EXPECT_EQ(pool.stats().hits, 1);
}

TEST(HostBufferPoolTest, AFreeSegmentIsSplitForSmallerBuffers) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  pool.TryAllocate(32 * kMiB).reset();
  std::shared_ptr<HostBuffer> a = pool.TryAllocate(2 * kMiB);
  std::shared_ptr<HostBuffer> b = pool.TryAllocate(20 * kMiB);
  std::shared_ptr<HostBuffer> c = pool.TryAllocate(10 * kMiB);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(heap.allocations(), 1) << "all three fit the one 32 MiB segment";
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().segments, 1);
  // The ranges do not overlap: each keeps its own bytes.
  std::memset(a->data(), 1, a->size());
  std::memset(b->data(), 2, b->size());
  std::memset(c->data(), 3, c->size());
  EXPECT_EQ(static_cast<const char*>(a->data())[a->size() - 1], 1);
  EXPECT_EQ(static_cast<const char*>(b->data())[b->size() - 1], 2);
  EXPECT_EQ(static_cast<const char*>(c->data())[0], 3);
}

TEST(HostBufferPoolTest, ReleasedRangesMergeBackIntoTheWholeSegment) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  pool.TryAllocate(32 * kMiB).reset();
  std::shared_ptr<HostBuffer> a = pool.TryAllocate(8 * kMiB);
  std::shared_ptr<HostBuffer> b = pool.TryAllocate(8 * kMiB);
  std::shared_ptr<HostBuffer> c = pool.TryAllocate(16 * kMiB);
  b.reset();  // a free hole between a and c
  a.reset();  // merges with the hole on its right
  c.reset();  // merges with both sides
  EXPECT_EQ(pool.stats().cached_bytes, 32 * kMiB);
  std::shared_ptr<HostBuffer> whole = pool.TryAllocate(32 * kMiB);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(heap.allocations(), 1) << "the ranges merged back into one 32 MiB range";
}

TEST(HostBufferPoolTest, SteadyMixedSizesStopAllocating) {
  // The traffic that made a pool of whole blocks allocate in every call: a large size fills
  // the limit, then a smaller one (less than half of it) arrives.
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  for (int round = 0; round < 5; ++round) {
    std::shared_ptr<HostBuffer> large = pool.TryAllocate(60 * kMiB);
    ASSERT_NE(large, nullptr);
    large.reset();
    std::shared_ptr<HostBuffer> medium = pool.TryAllocate(22 * kMiB);
    std::shared_ptr<HostBuffer> other = pool.TryAllocate(22 * kMiB);
    ASSERT_NE(medium, nullptr);
    ASSERT_NE(other, nullptr);
  }
  EXPECT_EQ(heap.allocations(), 1);
  EXPECT_EQ(pool.stats().hits, 14);
  EXPECT_EQ(pool.stats().refusals, 0);
}

TEST(HostBufferPoolTest, BestFitPrefersTheSmallestRangeThatFits) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  std::shared_ptr<HostBuffer> big = pool.TryAllocate(32 * kMiB);
  std::shared_ptr<HostBuffer> small = pool.TryAllocate(4 * kMiB);
  void* small_data = small->data();
  big.reset();
  small.reset();
  std::shared_ptr<HostBuffer> again = pool.TryAllocate(3 * kMiB);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->data(), small_data) << "the 4 MiB segment, not a split of the 32 MiB one";
  EXPECT_EQ(heap.allocations(), 2);
}

TEST(HostBufferPoolTest, ConcurrentBuffersNeverShareBytes) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(96 * kMiB));
  std::vector<std::thread> threads;
  std::atomic<int> corrupted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &corrupted, t] {
      std::mt19937 rng(1234 + t);
      for (int i = 0; i < 200; ++i) {
        const size_t bytes = kMiB + rng() % (12 * kMiB);
        std::shared_ptr<HostBuffer> b = pool.TryAllocate(bytes);
        if (b == nullptr) continue;  // the limit, with the other threads' buffers
        const auto mark = static_cast<unsigned char>(t * 50 + i % 50 + 1);
        auto* data = static_cast<unsigned char*>(b->data());
        std::memset(data, mark, bytes);
        std::this_thread::yield();
        if (data[0] != mark || data[bytes / 2] != mark || data[bytes - 1] != mark) ++corrupted;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(corrupted.load(), 0);
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_LE(stats.cached_bytes, 96 * kMiB);
  EXPECT_EQ(pool.Trim(absl::InfiniteFuture()), stats.cached_bytes);
  EXPECT_EQ(heap.live(), 0u);
}

TEST(HostBufferPoolTest, NeverHoldsMoreThanTheLimit) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(16 * kMiB));
  std::shared_ptr<HostBuffer> a = pool.TryAllocate(10 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.TryAllocate(8 * kMiB), nullptr) << "10 + 8 MiB is past 16";
  EXPECT_EQ(pool.TryAllocate(17 * kMiB), nullptr) << "larger than the limit";
  EXPECT_EQ(pool.stats().refusals, 2);
  std::shared_ptr<HostBuffer> b = pool.TryAllocate(6 * kMiB);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(heap.live(), 2u);
}

TEST(HostBufferPoolTest, CachedBlocksAreFreedToMakeRoom) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(16 * kMiB));
  pool.TryAllocate(4 * kMiB).reset();
  pool.TryAllocate(10 * kMiB).reset();
  EXPECT_EQ(pool.stats().cached_bytes, 14 * kMiB);
  // 12 MiB fits neither cached block (10 < 12; 4 < 12): both are freed for a new one.
  std::shared_ptr<HostBuffer> big = pool.TryAllocate(12 * kMiB);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(heap.live(), 1u);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 12 * kMiB);
}

TEST(HostBufferPoolTest, FailedAllocationIsARefusalAndGivesTheBytesBack) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(16 * kMiB));
  heap.set_fail(true);
  EXPECT_EQ(pool.TryAllocate(8 * kMiB), nullptr);
  EXPECT_EQ(pool.stats().refusals, 1);
  heap.set_fail(false);
  EXPECT_NE(pool.TryAllocate(16 * kMiB), nullptr) << "the failed 8 MiB must not stay counted";
}

TEST(HostBufferPoolTest, TrimFreesIdleBlocksOnly) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  std::shared_ptr<HostBuffer> held = pool.TryAllocate(4 * kMiB);
  pool.TryAllocate(8 * kMiB).reset();
  EXPECT_EQ(pool.Trim(absl::Now()), 0u) << "released just now";
  EXPECT_EQ(pool.Trim(absl::Now() + absl::Seconds(31)), 8 * kMiB);
  EXPECT_EQ(heap.live(), 1u);
  EXPECT_EQ(pool.stats().segments, 1);
  EXPECT_EQ(pool.stats().in_use_bytes, 4 * kMiB);
}

TEST(HostBufferPoolTest, BuffersMayOutliveThePool) {
  CountingHeap heap;
  std::shared_ptr<HostBuffer> survivor;
  {
    HostBufferPool pool(heap.Options(64 * kMiB));
    survivor = pool.TryAllocate(4 * kMiB);
    pool.TryAllocate(6 * kMiB).reset();
  }
  EXPECT_EQ(heap.live(), 1u) << "the cached block goes with the pool";
  survivor.reset();
  EXPECT_EQ(heap.live(), 0u);
}

TEST(HostBufferPoolTest, ZeroLimitGivesNothing) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(0));
  EXPECT_EQ(pool.TryAllocate(4 * kMiB), nullptr);
  EXPECT_EQ(heap.allocations(), 0);
}

}  // namespace
}  // namespace kernelserve
