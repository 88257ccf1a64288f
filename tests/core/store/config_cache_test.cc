#include "core/store/config_cache.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// A config that encodes `n`, so a lookup can be checked against its key.
KernelConfig ConfigFor(int n) {
  KernelConfig config;
  config.block_q = n;
  config.block_k = 2 * n + 1;
  config.platform = "cpu";
  return config;
}

std::string KeyFor(int n) { return "mean_pooling@v1:" + std::to_string(n); }

TEST(ConfigCacheTest, HitAndMiss) {
  ConfigCache cache(4);
  EXPECT_FALSE(cache.Get(KeyFor(1)).has_value());
  cache.Put(KeyFor(1), ConfigFor(1));
  std::optional<KernelConfig> hit = cache.Get(KeyFor(1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, ConfigFor(1));
  EXPECT_FALSE(cache.Get(KeyFor(2)).has_value());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.capacity(), 4u);
}

TEST(ConfigCacheTest, PutReplacesAndMarksMostRecent) {
  ConfigCache cache(3);
  cache.Put(KeyFor(1), ConfigFor(1));
  cache.Put(KeyFor(2), ConfigFor(2));
  cache.Put(KeyFor(1), ConfigFor(7));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Get(KeyFor(1)).value(), ConfigFor(7));
  cache.Put(KeyFor(2), ConfigFor(8));
  auto entries = cache.Entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].first, KeyFor(2));
  EXPECT_EQ(entries[0].second, ConfigFor(8));
  EXPECT_EQ(entries[1].first, KeyFor(1));
}

TEST(ConfigCacheTest, EvictsLeastRecentlyUsed) {
  ConfigCache cache(3);
  for (int i = 1; i <= 3; ++i) cache.Put(KeyFor(i), ConfigFor(i));
  ASSERT_TRUE(cache.Get(KeyFor(1)).has_value());  // order now 1, 3, 2
  cache.Put(KeyFor(4), ConfigFor(4));             // evicts 2
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Get(KeyFor(2)).has_value());
  cache.Put(KeyFor(5), ConfigFor(5));  // evicts 3
  EXPECT_FALSE(cache.Get(KeyFor(3)).has_value());
  auto entries = cache.Entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].first, KeyFor(5));
  EXPECT_EQ(entries[1].first, KeyFor(4));
  EXPECT_EQ(entries[2].first, KeyFor(1));
}

TEST(ConfigCacheTest, EraseAndClear) {
  ConfigCache cache(4);
  cache.Put(KeyFor(1), ConfigFor(1));
  cache.Put(KeyFor(2), ConfigFor(2));
  EXPECT_TRUE(cache.Erase(KeyFor(1)));
  EXPECT_FALSE(cache.Erase(KeyFor(1)));
  EXPECT_FALSE(cache.Get(KeyFor(1)).has_value());
  EXPECT_EQ(cache.size(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(cache.Entries().empty());
  cache.Put(KeyFor(3), ConfigFor(3));  // usable after Clear
  EXPECT_EQ(cache.Get(KeyFor(3)).value(), ConfigFor(3));
}

TEST(ConfigCacheTest, EntriesForADeviceAreErasedForThatDeviceOnly) {
  ConfigCache cache(4);
  cache.Put(KeyFor(1), ConfigFor(1), "gpu-a");
  cache.Put(KeyFor(2), ConfigFor(2));  // no device named
  EXPECT_EQ(cache.DeviceOf(KeyFor(1)), "gpu-a");
  EXPECT_EQ(cache.DeviceOf(KeyFor(2)), "");
  EXPECT_EQ(cache.DeviceOf(KeyFor(3)), "");
  EXPECT_FALSE(cache.EraseFor(KeyFor(1), "gpu-b"));
  EXPECT_EQ(cache.Get(KeyFor(1)).value(), ConfigFor(1));
  EXPECT_TRUE(cache.EraseFor(KeyFor(1), "gpu-a"));
  EXPECT_FALSE(cache.Get(KeyFor(1)).has_value());
  EXPECT_TRUE(cache.EraseFor(KeyFor(2), "gpu-b"));
  EXPECT_FALSE(cache.EraseFor(KeyFor(2), "gpu-b"));
  cache.Put(KeyFor(3), ConfigFor(3), "gpu-a");
  cache.Put(KeyFor(3), ConfigFor(4), "gpu-b");  // a replacement names its own device
  EXPECT_EQ(cache.DeviceOf(KeyFor(3)), "gpu-b");
}

TEST(ConfigCacheTest, ConcurrentPutAndGet) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 200;
  constexpr int kOps = 20000;
  ConfigCache cache(64);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&cache, &mismatches, t] {
      std::mt19937 rng(1234 + t);
      std::uniform_int_distribution<int> key(0, kKeys - 1);
      for (int i = 0; i < kOps; ++i) {
        const int n = key(rng);
        if (i % 3 == 0) {
          cache.Put(KeyFor(n), ConfigFor(n));
        } else if (std::optional<KernelConfig> got = cache.Get(KeyFor(n))) {
          if (*got != ConfigFor(n)) ++mismatches[t];
        }
        if (i % 1000 == 0) cache.Erase(KeyFor(key(rng)));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_LE(cache.size(), cache.capacity());
  EXPECT_GT(cache.size(), 0u);
  const auto entries = cache.Entries();
  EXPECT_EQ(entries.size(), cache.size());
  for (const auto& [key, config] : entries) {
    EXPECT_EQ(key, KeyFor(config.block_q));
    EXPECT_EQ(config, ConfigFor(config.block_q));
  }
}

}  // namespace
}  // namespace kernelserve
