#include "core/store/store_factory.h"

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

TEST(OpenStoreTest, MemoryMeansNoPersistentTier) {
  absl::StatusOr<std::unique_ptr<PersistentStore>> store = OpenStore("memory");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*store, nullptr);
}

TEST(OpenStoreTest, FileWithPath) {
  std::string dir = ::testing::TempDir() + "/store_factory_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/sub/configs.json";
  absl::StatusOr<std::unique_ptr<PersistentStore>> store = OpenStore("file:" + path);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_NE(*store, nullptr);
  EXPECT_EQ((*store)->name(), "file");
  EXPECT_EQ((*store)->source(), ConfigSource::kFile);
  EXPECT_EQ((*store)->location(), path);
  std::filesystem::remove_all(dir);
}

TEST(OpenStoreTest, FileAtDefaultPath) {
  std::string dir = ::testing::TempDir() + "/store_factory_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const char* old = getenv("XDG_CACHE_HOME");
  const std::string saved = old == nullptr ? "" : old;
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  absl::StatusOr<std::unique_ptr<PersistentStore>> store = OpenStore("file");
  if (old == nullptr) {
    unsetenv("XDG_CACHE_HOME");
  } else {
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  }
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_NE(*store, nullptr);
  EXPECT_EQ((*store)->location(), dir + "/kernelserve/configs.json");
  std::filesystem::remove_all(dir);
}

TEST(OpenStoreTest, RedisUrlConnectsLazily) {
  // Nothing needs to listen there: the store connects on first use.
  absl::StatusOr<std::unique_ptr<PersistentStore>> store = OpenStore("redis://127.0.0.1:1/4");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_NE(*store, nullptr);
  EXPECT_EQ((*store)->name(), "redis");
  EXPECT_EQ((*store)->source(), ConfigSource::kRedis);
  EXPECT_EQ((*store)->location(), "redis://127.0.0.1:1/4");
  EXPECT_EQ((*store)->Get("0000000000000000", "k@v1:0").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(OpenStoreTest, RejectsUnknownSpecs) {
  for (const char* spec : {"", "disk", "file:", "Memory", "redis:/x", "redis://host:nope/0",
                           "s3://bucket/configs.json"}) {
    absl::Status status = OpenStore(spec).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << spec;
  }
  absl::Status status = OpenStore("disk").status();
  EXPECT_NE(std::string(status.message()).find("file:PATH"), std::string::npos) << status;
  EXPECT_NE(std::string(status.message()).find("redis://"), std::string::npos) << status;
}

}  // namespace
}  // namespace kernelserve
