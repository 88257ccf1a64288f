#include "core/store/file_store.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/stored_config.h"

namespace kernelserve {
namespace {

namespace fs = std::filesystem;

using ::kernelserve::testing::SampleStoredConfig;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/file_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/nested/dir/configs.json";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<FileStore> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // The file as JSON; fails the test when it does not parse or has the wrong layout.
  nlohmann::json FileJson() {
    nlohmann::json j = nlohmann::json::parse(ReadFile(path_), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << ReadFile(path_);
    if (j.is_discarded()) return nlohmann::json::object();
    EXPECT_EQ(j.value("schema", 0), 1);
    EXPECT_TRUE(j.contains("entries") && j["entries"].is_object());
    return j;
  }

  std::string dir_;
  std::string path_;
  std::mt19937 rng_{42};
};

TEST_F(FileStoreTest, NamesItself) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->name(), "file");
  EXPECT_EQ(store->source(), ConfigSource::kFile);
  EXPECT_EQ(store->location(), path_);
  EXPECT_TRUE(store->warnings().empty());
  EXPECT_TRUE(fs::is_directory(dir_ + "/nested/dir"));
  EXPECT_FALSE(fs::exists(path_));  // created by the first write
}

TEST_F(FileStoreTest, PutGetDeleteRoundTrip) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(store->Get(value.fingerprint_hash, value.cache_key).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Put(value).ok());
  absl::StatusOr<StoredConfig> got = store->Get(value.fingerprint_hash, value.cache_key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ToJson(), value.ToJson());
  EXPECT_EQ(store->Get("bbbbbbbbbbbbbbbb", value.cache_key).status().code(),
            absl::StatusCode::kNotFound);

  StoredConfig replaced = value;
  replaced.config.block_size += 1;
  ASSERT_TRUE(store->Put(replaced).ok());
  EXPECT_EQ(store->Get(value.fingerprint_hash, value.cache_key)->config, replaced.config);

  ASSERT_TRUE(store->Delete(value.fingerprint_hash, value.cache_key).ok());
  EXPECT_EQ(store->Get(value.fingerprint_hash, value.cache_key).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete(value.fingerprint_hash, value.cache_key).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FileStoreTest, SurvivesReopen) {
  std::vector<StoredConfig> values;
  {
    auto store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
      values.push_back(SampleStoredConfig(rng_, "mean_pooling@v1", "cccccccccccccccc"));
      ASSERT_TRUE(store->Put(values.back()).ok());
    }
    ASSERT_TRUE(store->Flush().ok());
  }
  auto reopened = OpenOrDie();
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(reopened->warnings().empty());
  for (const StoredConfig& value : values) {
    absl::StatusOr<StoredConfig> got = reopened->Get(value.fingerprint_hash, value.cache_key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ToJson(), value.ToJson());
  }
}

TEST_F(FileStoreTest, FileIsValidJsonAfterEveryWrite) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  std::vector<StoredConfig> values;
  for (int i = 0; i < 6; ++i) {
    values.push_back(SampleStoredConfig(rng_, "flash_attention@v1", "dddddddddddddddd"));
    ASSERT_TRUE(store->Put(values.back()).ok());
    nlohmann::json j = FileJson();
    EXPECT_EQ(j["entries"].size(), values.size());
    const std::string key = values.back().fingerprint_hash + "/" + values.back().cache_key;
    ASSERT_TRUE(j["entries"].contains(key));
    EXPECT_EQ(j["entries"][key].dump(), nlohmann::json::parse(values.back().ToJson()).dump());
  }
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(store->Delete(values[i].fingerprint_hash, values[i].cache_key).ok());
    EXPECT_EQ(FileJson()["entries"].size(), values.size() - i - 1);
  }
  // No temporary files are left behind.
  for (const auto& entry : fs::directory_iterator(fs::path(path_).parent_path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "configs.json" || name == "configs.json.lock") << name;
  }
}

TEST_F(FileStoreTest, CorruptFileIsRenamedAside) {
  fs::create_directories(fs::path(path_).parent_path());
  const std::string junk = "{\"schema\":1,\"entries\":{\"a/b\": tru";
  std::ofstream(path_) << junk;
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->warnings().size(), 1u);
  EXPECT_NE(store->warnings()[0].find("renamed to"), std::string::npos) << store->warnings()[0];
  EXPECT_FALSE(fs::exists(path_));
  std::vector<std::string> aside;
  for (const auto& entry : fs::directory_iterator(fs::path(path_).parent_path())) {
    if (entry.path().filename().string().starts_with("configs.json.corrupt-")) {
      aside.push_back(entry.path().string());
    }
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(ReadFile(aside[0]), junk);
  absl::StatusOr<std::vector<StoredConfig>> all = store->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  // The store works afterwards.
  const StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "eeeeeeeeeeeeeeee");
  ASSERT_TRUE(store->Put(value).ok());
  EXPECT_TRUE(store->Get(value.fingerprint_hash, value.cache_key).ok());
}

TEST_F(FileStoreTest, OtherSchemaIsTreatedAsCorrupt) {
  fs::create_directories(fs::path(path_).parent_path());
  std::ofstream(path_) << R"({"schema":2,"entries":{}})";
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->warnings().size(), 1u);
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(FileStoreTest, DeeplyNestedFileIsTreatedAsCorrupt) {
  // Loading dumps each entry: one nested this deep would overflow the stack.
  fs::create_directories(fs::path(path_).parent_path());
  std::ofstream(path_) << R"({"schema":1,"entries":{"a/b":)" << std::string(500000, '[')
                       << std::string(500000, ']') << "}}";
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->warnings().size(), 1u);
  EXPECT_NE(store->warnings()[0].find("nested more than"), std::string::npos)
      << store->warnings()[0];
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(FileStoreTest, EntryThatDoesNotDecodeIsDataLoss) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const StoredConfig good = SampleStoredConfig(rng_, "mean_pooling@v1", "ffffffffffffffff");
  ASSERT_TRUE(store->Put(good).ok());
  nlohmann::json j = FileJson();
  j["entries"]["ffffffffffffffff/mean_pooling@v1:bad"] = {{"schema", 99}};
  std::ofstream(path_ + ".new") << j.dump();
  fs::rename(path_ + ".new", path_);

  EXPECT_EQ(store->Get("ffffffffffffffff", "mean_pooling@v1:bad").status().code(),
            absl::StatusCode::kDataLoss);
  absl::StatusOr<std::vector<StoredConfig>> all = store->List("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].cache_key, good.cache_key);
}

// An entry whose config was written under config schema 1 (before named fields): Get misses
// cleanly (NotFound, not DataLoss), List leaves it out, and a Put replaces it.
TEST_F(FileStoreTest, EntryOfTheOldConfigSchemaIsAMiss) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const StoredConfig good = SampleStoredConfig(rng_, "mean_pooling@v1", "ffffffffffffffff");
  ASSERT_TRUE(store->Put(good).ok());
  nlohmann::json j = FileJson();
  nlohmann::json old = nlohmann::json::parse(good.ToJson());
  old["key"] = "mean_pooling@v1:old";
  old["config"] = {{"schema", 1}, {"block_size", 32}, {"num_warps", 2}, {"platform", "cpu"}};
  j["entries"]["ffffffffffffffff/mean_pooling@v1:old"] = old;
  std::ofstream(path_ + ".new") << j.dump();
  fs::rename(path_ + ".new", path_);

  const absl::Status miss = store->Get("ffffffffffffffff", "mean_pooling@v1:old").status();
  EXPECT_EQ(miss.code(), absl::StatusCode::kNotFound) << miss;
  EXPECT_NE(miss.message().find("config schema 1 is not the current 2"), std::string::npos) << miss;
  absl::StatusOr<std::vector<StoredConfig>> all = store->List("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].cache_key, good.cache_key);
  StoredConfig fresh = good;
  fresh.cache_key = "mean_pooling@v1:old";
  ASSERT_TRUE(store->Put(fresh).ok());
  EXPECT_TRUE(store->Get("ffffffffffffffff", "mean_pooling@v1:old").ok());
}

TEST_F(FileStoreTest, ListFiltersByKernelPrefix) {
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(SampleStoredConfig(rng_, "mean_pooling@v1", "1111111111111111")).ok());
  ASSERT_TRUE(store->Put(SampleStoredConfig(rng_, "mean_pooling@v1", "2222222222222222")).ok());
  ASSERT_TRUE(store->Put(SampleStoredConfig(rng_, "flash_attention@v1", "1111111111111111")).ok());
  EXPECT_EQ(store->List("")->size(), 3u);
  EXPECT_EQ(store->List("mean")->size(), 2u);
  EXPECT_EQ(store->List("flash_attention@v1")->size(), 1u);
  EXPECT_EQ(store->List("flash_attention@v2")->size(), 0u);
  absl::StatusOr<std::vector<StoredConfig>> pooling = store->List("mean_pooling");
  ASSERT_TRUE(pooling.ok()) << pooling.status();
  for (const StoredConfig& value : *pooling) EXPECT_EQ(value.kernel_id, "mean_pooling@v1");
}

TEST_F(FileStoreTest, TwoInstancesSeeEachOthersWrites) {
  auto a = OpenOrDie();
  auto b = OpenOrDie();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Same-sized values written back to back: the change must be noticed even when size and
  // mtime happen to match.
  StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "9999999999999999");
  for (int round = 0; round < 50; ++round) {
    value.config.block_size = 100 + round % 10;
    FileStore* writer = round % 2 == 0 ? a.get() : b.get();
    FileStore* reader = round % 2 == 0 ? b.get() : a.get();
    ASSERT_TRUE(writer->Put(value).ok());
    absl::StatusOr<StoredConfig> got = reader->Get(value.fingerprint_hash, value.cache_key);
    ASSERT_TRUE(got.ok()) << "round " << round << ": " << got.status();
    ASSERT_EQ(got->config.block_size, value.config.block_size) << "round " << round;
  }
  // Writes of different keys from both instances are all kept.
  const StoredConfig from_a = SampleStoredConfig(rng_, "mean_pooling@v1", "8888888888888888");
  const StoredConfig from_b = SampleStoredConfig(rng_, "mean_pooling@v1", "7777777777777777");
  ASSERT_TRUE(a->Put(from_a).ok());
  ASSERT_TRUE(b->Put(from_b).ok());
  EXPECT_EQ(a->List("")->size(), 3u);
  EXPECT_EQ(b->List("")->size(), 3u);
  ASSERT_TRUE(b->Delete(from_a.fingerprint_hash, from_a.cache_key).ok());
  EXPECT_EQ(a->Get(from_a.fingerprint_hash, from_a.cache_key).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FileStoreTest, ConcurrentWritersLoseNothing) {
  auto a = OpenOrDie();
  auto b = OpenOrDie();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 10;
  std::vector<std::thread> threads;
  std::vector<std::vector<StoredConfig>> written(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      written[t].push_back(SampleStoredConfig(rng_, "flash_attention@v1", "abababababababab"));
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      FileStore* store = t % 2 == 0 ? a.get() : b.get();
      for (const StoredConfig& value : written[t]) EXPECT_TRUE(store->Put(value).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto reopened = OpenOrDie();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->List("")->size(), static_cast<size_t>(kThreads * kPerThread));
  for (const auto& values : written) {
    for (const StoredConfig& value : values) {
      EXPECT_TRUE(reopened->Get(value.fingerprint_hash, value.cache_key).ok());
    }
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultFileStorePathTest, FollowsXdgThenHome) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(DefaultFileStorePath(), "/x/cache/kernelserve/configs.json");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(DefaultFileStorePath(), "/home/someone/.cache/kernelserve/configs.json");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    EXPECT_EQ(DefaultFileStorePath(), "/tmp/kernelserve/configs.json");
  }
}

TEST(FileStoreOpenTest, RejectsEmptyPath) {
  EXPECT_EQ(FileStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
