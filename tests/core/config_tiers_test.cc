#include "core/config_tiers.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "tests/support/chain_fixture.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::FakeConfig;

class ConfigTiersTest : public ::kernelserve::testing::ChainFixture {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "/config_tiers_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(ConfigTiersTest, MemoryHasNoPersistentTier) {
  absl::StatusOr<ConfigTiers> tiers = OpenConfigTiers("memory");
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_EQ(tiers->store, nullptr);
  ASSERT_NE(tiers->memory, nullptr);
  ASSERT_NE(tiers->chain, nullptr);
  EXPECT_EQ(tiers->chain->memory(), tiers->memory.get());
  EXPECT_EQ(tiers->chain->store(), nullptr);
  EXPECT_EQ(tiers->StoreLocation(), "memory (none)");
  EXPECT_EQ(tiers->chain->Select(Request(false))->source, ConfigSource::kHeuristic);
  EXPECT_EQ(tiers->memory->size(), 1u);
}

// The chain reads and writes the store it was opened with, also after the tiers move.
TEST_F(ConfigTiersTest, FileStoreIsTheChainsPersistentTier) {
  const std::string path = dir_ + "/configs.json";
  absl::StatusOr<ConfigTiers> opened = OpenConfigTiers("file:" + path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ConfigTiers tiers = *std::move(opened);
  ASSERT_NE(tiers.store, nullptr);
  EXPECT_EQ(tiers.chain->store(), tiers.store.get());
  EXPECT_EQ(tiers.chain->memory(), tiers.memory.get());
  EXPECT_EQ(tiers.StoreLocation(), path);

  ASSERT_TRUE(tiers.chain->Pin(Request(), FakeConfig(2)).ok());
  absl::StatusOr<StoredConfig> stored =
      tiers.store->Get(device_.fingerprint.Hash(), invocation_.CacheKey());
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->config, FakeConfig(2));
  tiers.memory->Clear();
  EXPECT_EQ(tiers.chain->Select(Request(false))->source, ConfigSource::kFile);
}

// A Redis store opens while nothing listens; the chain reports its errors through the options.
TEST_F(ConfigTiersTest, ChainOptionsReachTheChain) {
  std::atomic<int> errors{0};
  ChainOptions options;
  options.on_store_error = [&errors](std::string_view store, std::string_view op) {
    if (store == "redis" && op == "get") ++errors;
  };
  absl::StatusOr<ConfigTiers> tiers = OpenConfigTiers("redis://127.0.0.1:1/0", options);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_EQ(tiers->StoreLocation(), "redis://127.0.0.1:1/0");
  absl::StatusOr<Selection> s = tiers->chain->Select(Request(false));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, ConfigSource::kHeuristic);
  EXPECT_EQ(errors, 1);
}

TEST_F(ConfigTiersTest, BadSpecIsInvalidArgument) {
  absl::StatusOr<ConfigTiers> tiers = OpenConfigTiers("postgres://db");
  EXPECT_EQ(tiers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tiers.status().message().find("redis://"), std::string::npos) << tiers.status();
}

}  // namespace
}  // namespace kernelserve
