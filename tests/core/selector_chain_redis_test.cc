// The chain over a real redis-server: shared configs between "replicas" (two chains), the
// tuning lease, and Redis going away and coming back.
#include <atomic>
#include <memory>

#include "core/selector_chain.h"
#include "core/store/store_factory.h"
#include "gtest/gtest.h"
#include "tests/support/chain_fixture.h"
#include "tests/support/redis_server.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::FakeConfig;

class ChainRedisTest : public ::kernelserve::testing::ChainFixture {
 protected:
  void SetUp() override {
    absl::Status started = redis_.Start();
    if (absl::IsNotFound(started)) GTEST_SKIP() << started.message();
    ASSERT_TRUE(started.ok()) << started;
  }

  std::unique_ptr<PersistentStore> Connect() {
    absl::StatusOr<std::unique_ptr<PersistentStore>> s = OpenStore(redis_.url());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  ChainOptions CountingOptions() {
    ChainOptions o;
    o.on_store_error = [this](std::string_view store, std::string_view) {
      if (store == "redis") ++store_errors_;
    };
    return o;
  }

  ::kernelserve::testing::RedisServerProcess redis_;
  std::atomic<int> store_errors_{0};
};

TEST_F(ChainRedisTest, SecondReplicaReusesTheFirstOnesTunedConfig) {
  std::unique_ptr<PersistentStore> a_store = Connect();
  std::unique_ptr<PersistentStore> b_store = Connect();
  ConfigCache a_memory, b_memory;
  ConfigSelectorChain a(&a_memory, a_store.get());
  ConfigSelectorChain b(&b_memory, b_store.get());
  EXPECT_EQ(a.Select(Request())->source, ConfigSource::kAutotune);
  absl::StatusOr<Selection> reused = b.Select(Request());
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(reused->source, ConfigSource::kRedis);
  EXPECT_EQ(reused->config, FakeConfig(3));
  EXPECT_EQ(tunes_, 1);
}

TEST_F(ChainRedisTest, LeaseHeldElsewhereAnswersHeuristicUntilTheTunedConfigLands) {
  std::unique_ptr<PersistentStore> other = Connect();
  const std::string fp = device_.fingerprint.Hash();
  const std::string key = invocation_.CacheKey();
  ASSERT_TRUE(*other->TryAcquireLease(fp, key, absl::Seconds(30)));

  std::unique_ptr<PersistentStore> store = Connect();
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store.get());
  absl::StatusOr<Selection> waiting = chain.Select(Request());
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->source, ConfigSource::kHeuristic);
  EXPECT_EQ(tunes_, 0);
  EXPECT_EQ(memory.size(), 0u);  // not cached: the tuned config must be picked up later

  // The other replica finishes tuning and stores its winner.
  StoredConfig tuned;
  tuned.config = FakeConfig(2);
  tuned.kernel_id = kernel_.id();
  tuned.fingerprint_hash = fp;
  tuned.cache_key = key;
  tuned.origin = "autotune";
  tuned.measured_seconds = 1e-3;
  ASSERT_TRUE(other->Put(tuned).ok());
  ASSERT_TRUE(other->ReleaseLease(fp, key).ok());
  absl::StatusOr<Selection> landed = chain.Select(Request());
  EXPECT_EQ(landed->source, ConfigSource::kRedis);
  EXPECT_EQ(landed->config, FakeConfig(2));
  EXPECT_EQ(tunes_, 0);
}

TEST_F(ChainRedisTest, RedisDownNeverFailsASelectionAndCountsErrors) {
  std::unique_ptr<PersistentStore> store = Connect();
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store.get(), CountingOptions());
  ASSERT_TRUE(redis_.Stop().ok());

  absl::StatusOr<Selection> s = chain.Select(Request());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, ConfigSource::kAutotune);  // tuned locally: no lease to be had
  EXPECT_GE(store_errors_, 2);                    // get and put (lease too)
  EXPECT_EQ(chain.Select(Request())->source, ConfigSource::kMemory);
}

}  // namespace
}  // namespace kernelserve
