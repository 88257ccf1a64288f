#include "core/selector_chain.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/store/store_factory.h"
#include "gtest/gtest.h"
#include "tests/support/chain_fixture.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::FakeConfig;

// The chain over a file store in a fresh directory.
class ChainTest : public ::kernelserve::testing::ChainFixture {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ks_chain_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = OpenFile();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<PersistentStore> OpenFile() {
    absl::StatusOr<std::unique_ptr<PersistentStore>> s =
        OpenStore("file:" + (dir_ / "configs.json").string());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  std::filesystem::path dir_;
  std::unique_ptr<PersistentStore> store_;
};

TEST_F(ChainTest, HeuristicThenMemoryThenFile) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  absl::StatusOr<Selection> first = chain.Select(Request(false));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, ConfigSource::kHeuristic);
  EXPECT_EQ(first->config, FakeConfig(1));
  EXPECT_EQ(first->cache_key, invocation_.CacheKey());

  absl::StatusOr<Selection> second = chain.Select(Request(false));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->source, ConfigSource::kMemory);

  // A new process: empty memory, same file.
  std::unique_ptr<PersistentStore> reopened = OpenFile();
  ConfigCache fresh;
  ConfigSelectorChain restarted(&fresh, reopened.get());
  absl::StatusOr<Selection> third = restarted.Select(Request(false));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->source, ConfigSource::kFile);
  EXPECT_EQ(third->config, FakeConfig(1));
  EXPECT_EQ(tunes_, 0);
}

TEST_F(ChainTest, OverrideWinsAndIsChecked) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  SelectRequest r = Request(true);
  r.override_config = FakeConfig(2);
  absl::StatusOr<Selection> s = chain.Select(r);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->source, ConfigSource::kOverride);
  EXPECT_EQ(s->config, FakeConfig(2));
  EXPECT_EQ(memory.size(), 0u);  // an override is not cached

  r.override_config = FakeConfig(9);
  EXPECT_EQ(chain.Select(r).status().code(), absl::StatusCode::kInvalidArgument);
  KernelConfig wrong_platform = FakeConfig(2);
  wrong_platform.platform = "cuda";
  r.override_config = wrong_platform;
  EXPECT_EQ(chain.Select(r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tunes_, 0);
}

TEST_F(ChainTest, OverlayScopesNest) {
  ConfigCache memory;
  memory.Put(invocation_.CacheKey(), FakeConfig(1));
  ConfigSelectorChain chain(&memory, store_.get());
  {
    ScopedConfigOverlay outer({{"fake_scale", FakeConfig(2)}});
    absl::StatusOr<Selection> s = chain.Select(Request(false));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->source, ConfigSource::kOverlay);
    EXPECT_EQ(s->config, FakeConfig(2));
    {
      ScopedConfigOverlay inner({{invocation_.CacheKey(), FakeConfig(3)}});
      EXPECT_EQ(chain.Select(Request(false))->config, FakeConfig(3));
    }
    EXPECT_EQ(chain.Select(Request(false))->config, FakeConfig(2));
  }
  absl::StatusOr<Selection> after = chain.Select(Request(false));
  EXPECT_EQ(after->source, ConfigSource::kMemory);
  EXPECT_EQ(after->config, FakeConfig(1));
}

TEST_F(ChainTest, OverlayIsPerThread) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  ScopedConfigOverlay overlay({{"fake_scale", FakeConfig(2)}});
  ConfigSource other_thread = ConfigSource::kOverlay;
  std::thread t([&] { other_thread = chain.Select(Request(false))->source; });
  t.join();
  EXPECT_EQ(other_thread, ConfigSource::kHeuristic);
}

TEST_F(ChainTest, AutotunePicksFastestCorrectCandidateAndPersists) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  absl::StatusOr<Selection> s = chain.Select(Request(true));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, ConfigSource::kAutotune);
  EXPECT_EQ(s->config, FakeConfig(3));  // 4 is faster but wrong, 5 fails
  ASSERT_TRUE(s->tune_report.has_value());
  ASSERT_EQ(s->tune_report->candidates.size(), 5u);
  EXPECT_EQ(s->tune_report->candidates[3].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s->tune_report->candidates[4].status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(s->tune_report->candidates[2].status.ok());

  absl::StatusOr<StoredConfig> stored = store_->Get(device_.fingerprint.Hash(), s->cache_key);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->origin, "autotune");
  EXPECT_EQ(stored->config, FakeConfig(3));
  EXPECT_GT(stored->measured_seconds, 0.0);
  EXPECT_EQ(chain.Select(Request(true))->source, ConfigSource::kMemory);
  EXPECT_EQ(tunes_, 1);
}

TEST_F(ChainTest, ConcurrentMissesTuneOnce) {
  counters_->launch_delay_ms = 2;
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  std::vector<std::thread> threads;
  std::vector<KernelConfig> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<Selection> s = chain.Select(Request(true));
      if (s.ok()) got[static_cast<size_t>(i)] = s->config;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(tunes_, 1);
  for (const KernelConfig& c : got) EXPECT_EQ(c, FakeConfig(3));
}

TEST_F(ChainTest, AllCandidatesFailGivesHeuristicAndCachesNothing) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  SelectRequest r = Request(true);
  r.tune = [this](const KernelConfig& heuristic,
                  const std::vector<KernelConfig>&) -> absl::StatusOr<TuneReport> {
    ++tunes_;
    absl::StatusOr<std::unique_ptr<PreparedRun>> run =
        kernel_.impl(Platform::kCpu)->Prepare(*problem_, inputs_, device_);
    return Autotune(**run, heuristic, {FakeConfig(4), FakeConfig(5)}, TuneOptions{});
  };
  absl::StatusOr<Selection> s = chain.Select(r);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->source, ConfigSource::kHeuristic);
  EXPECT_EQ(s->config, FakeConfig(1));
  EXPECT_FALSE(s->warnings.empty());
  EXPECT_EQ(memory.size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(device_.fingerprint.Hash(), s->cache_key).status()));
  EXPECT_EQ(chain.Select(r)->source, ConfigSource::kHeuristic);
  EXPECT_EQ(tunes_, 2);
}

TEST_F(ChainTest, TuneErrorIsReturnedNotCached) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  SelectRequest r = Request(true);
  r.tune = [](const KernelConfig&, const std::vector<KernelConfig>&) -> absl::StatusOr<TuneReport> {
    return absl::ResourceExhaustedError("out of memory");
  };
  EXPECT_EQ(chain.Select(r).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(memory.size(), 0u);
}

TEST_F(ChainTest, NoTierAllowedIsFailedPrecondition) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  SelectRequest r = Request(false);
  r.policy.allow_heuristics = false;
  EXPECT_EQ(chain.Select(r).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ChainTest, StoredConfigOutsideCandidateSpaceIsAMiss) {
  StoredConfig bad;
  bad.config = FakeConfig(7);
  bad.kernel_id = kernel_.id();
  bad.fingerprint_hash = device_.fingerprint.Hash();
  bad.cache_key = invocation_.CacheKey();
  bad.origin = "pinned";
  ASSERT_TRUE(store_->Put(bad).ok());
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  absl::StatusOr<Selection> s = chain.Select(Request(false));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->source, ConfigSource::kHeuristic);
  EXPECT_EQ(s->config, FakeConfig(1));
}

TEST_F(ChainTest, StoredHeuristicIsTunedWhenAutotuneIsAllowed) {
  {
    ConfigCache memory;
    ConfigSelectorChain chain(&memory, store_.get());
    ASSERT_EQ(chain.Select(Request(false))->source, ConfigSource::kHeuristic);
  }
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  EXPECT_EQ(chain.Select(Request(false))->source, ConfigSource::kFile);
  memory.Clear();
  absl::StatusOr<Selection> tuned = chain.Select(Request(true));
  EXPECT_EQ(tuned->source, ConfigSource::kAutotune);
  EXPECT_EQ(tuned->config, FakeConfig(3));
}

TEST_F(ChainTest, PinAndForget) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  EXPECT_EQ(chain.Pin(Request(), FakeConfig(9)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(chain.Pin(Request(), FakeConfig(2)).ok());
  EXPECT_EQ(chain.Select(Request(true))->config, FakeConfig(2));
  const std::string fp = device_.fingerprint.Hash();
  EXPECT_EQ(store_->Get(fp, invocation_.CacheKey())->origin, "pinned");
  ASSERT_TRUE(chain.Forget(fp, invocation_.CacheKey()).ok());
  EXPECT_EQ(chain.Forget(fp, invocation_.CacheKey()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(chain.Select(Request(false))->source, ConfigSource::kHeuristic);
}

// Free-form fields must name a variant the platform has: no text of a client's choosing is
// cached or stored.
TEST_F(ChainTest, PinnedAndOverrideConfigsNameOnlyThePlatformsVariants) {
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, store_.get());
  KernelConfig junk = FakeConfig(2);
  junk.algorithm = "junk";
  absl::Status pinned = chain.Pin(Request(), junk);
  EXPECT_EQ(pinned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pinned.message().find("algorithm='junk': algorithm is not a field of fake"),
            std::string::npos)
      << pinned;
  KernelConfig huge = FakeConfig(2);
  huge.algorithm = std::string(1 << 20, 'x');
  absl::Status refused = chain.Pin(Request(), huge);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("algorithm='" + std::string(64, 'x') + "...'"),
            std::string::npos);
  KernelConfig named = FakeConfig(2);
  named.named[std::string(1 << 20, 'y')] = 1;
  refused = chain.Pin(Request(), named);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("config '" + std::string(64, 'y') + "...'=1: not a field"),
            std::string::npos)
      << refused.message().substr(0, 300);
  EXPECT_EQ(memory.size(), 0u);
  EXPECT_FALSE(store_->Get(device_.fingerprint.Hash(), invocation_.CacheKey()).ok());
  SelectRequest r = Request(true);
  r.override_config = junk;
  EXPECT_EQ(chain.Select(r).status().code(), absl::StatusCode::kInvalidArgument);
}

// Forgetting a key for a device that holds no config of it deletes nothing and says so.
TEST_F(ChainTest, ForgetForAnotherDeviceIsNotFoundAndKeepsTheEntry) {
  const std::string key = invocation_.CacheKey();
  const std::string fp = device_.fingerprint.Hash();
  for (PersistentStore* store : {store_.get(), static_cast<PersistentStore*>(nullptr)}) {
    ConfigCache memory;
    ConfigSelectorChain chain(&memory, store);
    ASSERT_TRUE(chain.Pin(Request(), FakeConfig(2)).ok());
    const absl::Status wrong = chain.Forget("wrong-fingerprint", key);
    EXPECT_EQ(wrong.code(), absl::StatusCode::kNotFound) << wrong;
    EXPECT_NE(wrong.message().find(key), std::string::npos) << wrong;
    EXPECT_NE(wrong.message().find("'wrong-fingerprint'"), std::string::npos) << wrong;
    EXPECT_EQ(memory.DeviceOf(key), fp);
    absl::StatusOr<Selection> kept = chain.Select(Request(false));
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->source, ConfigSource::kMemory);
    EXPECT_EQ(kept->config, FakeConfig(2));
    if (store != nullptr) {
      EXPECT_EQ(store->Get(fp, key)->origin, "pinned");
    }
    ASSERT_TRUE(chain.Forget(fp, key).ok());
  }
}

}  // namespace
}  // namespace kernelserve
