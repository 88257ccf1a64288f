#include "core/store/persistent_store.h"

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/store/json_depth.h"
#include "gtest/gtest.h"
#include "tests/support/stored_config.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::SampleStoredConfig;

constexpr char kKernel[] = "flash_attention@v1";
constexpr char kFingerprint[] = "0123456789abcdef";

void ExpectSame(const StoredConfig& a, const StoredConfig& b) {
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.kernel_id, b.kernel_id);
  EXPECT_EQ(a.fingerprint_hash, b.fingerprint_hash);
  EXPECT_EQ(a.cache_key, b.cache_key);
  EXPECT_DOUBLE_EQ(a.measured_seconds, b.measured_seconds);
  EXPECT_EQ(a.origin, b.origin);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.stored_at_unix_ms, b.stored_at_unix_ms);
}

TEST(StoredConfigTest, RoundTrip) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    const StoredConfig value = SampleStoredConfig(rng, kKernel, kFingerprint);
    absl::StatusOr<StoredConfig> back = StoredConfig::FromJson(value.ToJson());
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSame(*back, value);
  }
}

TEST(StoredConfigTest, JsonLayout) {
  std::mt19937 rng(8);
  const StoredConfig value = SampleStoredConfig(rng, kKernel, kFingerprint);
  const nlohmann::json j = nlohmann::json::parse(value.ToJson());
  EXPECT_EQ(j.at("schema"), 1);
  ASSERT_TRUE(j.at("config").is_object());
  EXPECT_EQ(j.at("config").at("block_q"), value.config.block_q);
  EXPECT_EQ(j.at("kernel"), value.kernel_id);
  EXPECT_EQ(j.at("fingerprint"), value.fingerprint_hash);
  EXPECT_EQ(j.at("key"), value.cache_key);
  EXPECT_EQ(j.at("origin"), value.origin);
  EXPECT_EQ(j.at("host"), value.host);
  EXPECT_EQ(j.at("stored_at_unix_ms"), value.stored_at_unix_ms);
  EXPECT_DOUBLE_EQ(j.at("measured_seconds").get<double>(), value.measured_seconds);
}

TEST(StoredConfigTest, RejectsMalformed) {
  std::mt19937 rng(9);
  const nlohmann::json good =
      nlohmann::json::parse(SampleStoredConfig(rng, kKernel, kFingerprint).ToJson());
  const auto with = [&good](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = std::move(v);
    return j.dump();
  };
  const auto without = [&good](const char* key) {
    nlohmann::json j = good;
    j.erase(key);
    return j.dump();
  };
  const std::string cases[] = {
      "",
      "not json",
      "[1,2]",
      with("schema", 2),
      with("schema", "1"),
      without("schema"),
      without("config"),
      with("config", "block_q=1"),
      with("kernel", 5),
      without("key"),
      with("measured_seconds", "fast"),
      with("origin", 3),
      with("stored_at_unix_ms", 1.5),
  };
  for (const std::string& text : cases) {
    EXPECT_EQ(StoredConfig::FromJson(text).status().code(), absl::StatusCode::kInvalidArgument)
        << text;
  }
  EXPECT_TRUE(StoredConfig::FromJson(good.dump()).ok());
}

// A config stored before named fields (config schema 1, num_warps as the CPU's threads) is a
// miss, not damage.
TEST(StoredConfigTest, ConfigOfTheOldConfigSchemaIsNotFound) {
  const std::string v1 =
      R"({"schema":1,"config":{"schema":1,"block_size":32,"num_warps":2,"backend":"",)"
      R"("platform":"cpu"},"kernel":"mean_pooling@v1","fingerprint":"ffffffffffffffff",)"
      R"("key":"mean_pooling@v1:1"})";
  const absl::Status status = StoredConfig::FromJson(v1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(),
            "stored config: kernel config: config schema 1 is not the current 2 (written by "
            "another version)");
}

TEST(StoredConfigTest, ValueNested64LevelsDecodesAnd65IsInvalid) {
  std::mt19937 rng(10);
  const StoredConfig value = SampleStoredConfig(rng, kKernel, kFingerprint);
  const std::string json = value.ToJson();
  ASSERT_EQ(json.front(), '{');
  // The value's object is level 1; a field the decoder ignores holds the other levels.
  const auto nested = [&json](int levels) {
    return R"({"extra":)" + std::string(levels - 1, '[') + std::string(levels - 1, ']') + "," +
           json.substr(1);
  };
  absl::StatusOr<StoredConfig> at_limit = StoredConfig::FromJson(nested(kMaxJsonDepth));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  ExpectSame(*at_limit, value);
  const absl::Status deeper = StoredConfig::FromJson(nested(kMaxJsonDepth + 1)).status();
  EXPECT_EQ(deeper.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(deeper.message(), "stored config: JSON nested more than 64 levels deep");
}

TEST(StoredConfigTest, DeeplyNestedValueIsInvalidNotAStackOverflow) {
  // The decoder dumps the "config" object (and a bad "schema" into its error): a value nested
  // this deep would recurse once per level.
  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  for (const std::string& text :
       {R"({"schema":1,"config":{"x":)" + deep + "}}", R"({"schema":)" + deep + "}"}) {
    EXPECT_EQ(StoredConfig::FromJson(text).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kernelserve
