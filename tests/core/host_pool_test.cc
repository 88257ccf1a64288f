#include "core/host_pool.h"

#include <cstdlib>
#include <cstring>
#include <set>
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

TEST(HostBufferPoolTest, ABlockMoreThanTwiceTheSizeIsNotUsed) {
  CountingHeap heap;
  HostBufferPool pool(heap.Options(64 * kMiB));
  pool.TryAllocate(32 * kMiB).reset();
  std::shared_ptr<HostBuffer> small = pool.TryAllocate(2 * kMiB);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(heap.allocations(), 2);
  EXPECT_EQ(pool.stats().cached_bytes, 32 * kMiB);
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
