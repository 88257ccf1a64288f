#include "core/kernel_config.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

KernelConfig Sample() {
  KernelConfig config;
  config.block_q = 64;
  config.block_k = 128;
  config.num_warps = 4;
  config.num_stages = 2;
  config.platform = "cuda";
  config.algorithm = "split";
  config.priority = -3;
  config.named["lanes"] = 64;
  config.named["plan"] = int64_t{1} << 40;
  return config;
}

TEST(KernelConfigTest, JsonRoundTrip) {
  const KernelConfig config = Sample();
  absl::StatusOr<KernelConfig> back = KernelConfig::FromJson(config.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config);
}

TEST(KernelConfigTest, JsonHasSortedKeysAndSchema) {
  const std::string json = Sample().ToJson();
  EXPECT_NE(json.find("\"schema\":2"), std::string::npos);
  EXPECT_EQ(json.find("backend"), std::string::npos);
  EXPECT_NE(json.find(R"("fields":{"lanes":64,"plan":1099511627776})"), std::string::npos) << json;
  const std::vector<std::string> keys = {"algorithm",  "block_d",  "block_k",    "block_q",
                                         "block_size", "fields",   "num_stages", "num_warps",
                                         "platform",   "priority", "schema"};
  size_t last = 0;
  for (const std::string& key : keys) {
    const size_t at = json.find("\"" + key + "\"");
    ASSERT_NE(at, std::string::npos) << key;
    EXPECT_GT(at, last) << key << " out of order in " << json;
    last = at;
  }
}

TEST(KernelConfigTest, MissingKeysKeepDefaultsUnknownIgnored) {
  absl::StatusOr<KernelConfig> config =
      KernelConfig::FromJson(R"({"schema":2,"block_q":32,"future_field":[1,2]})");
  ASSERT_TRUE(config.ok()) << config.status();
  KernelConfig expected;
  expected.block_q = 32;
  EXPECT_EQ(*config, expected);
}

TEST(KernelConfigTest, BadJsonIsInvalidArgument) {
  EXPECT_EQ(KernelConfig::FromJson("{not json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson("[1,2]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelConfigTest, OtherSchemaVersionIsFailedPrecondition) {
  // A config written before named fields (schema 1: num_warps as the CPU's threads).
  absl::Status old =
      KernelConfig::FromJson(R"({"schema":1,"block_size":32,"num_warps":2,"backend":""})").status();
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.message(),
            "kernel config: config schema 1 is not the current 2 (written by another version)");
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":3,"block_q":32})").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(KernelConfig::FromJson(R"({"block_q":32})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":"2"})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelConfigTest, NamedFieldsRoundTripAndAreCheckedForType) {
  absl::StatusOr<KernelConfig> config =
      KernelConfig::FromJson(R"({"schema":2,"platform":"cpu","fields":{"threads":4}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->Named("threads"), 4);
  EXPECT_EQ(config->Named("lanes"), 0);
  EXPECT_EQ(config->DebugString(), "platform=cpu threads=4");
  EXPECT_EQ(*KernelConfig::FromJson(config->ToJson()), *config);
  // No named field: no "fields" key.
  EXPECT_EQ(KernelConfig().ToJson().find("fields"), std::string::npos);
  for (const char* bad : {R"({"schema":2,"fields":[1]})", R"({"schema":2,"fields":{"x":"4"}})",
                          R"({"schema":2,"fields":{"x":1.5}})",
                          R"({"schema":2,"fields":{"x":18446744073709551615}})"}) {
    EXPECT_EQ(KernelConfig::FromJson(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(KernelConfigTest, WrongFieldTypeIsInvalidArgument) {
  absl::StatusOr<KernelConfig> config = KernelConfig::FromJson(R"({"schema":2,"block_q":"64"})");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("block_q"), std::string::npos);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":2,"platform":3})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":2,"num_warps":4.5})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":2,"block_k":99999999999})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelConfigTest, DebugStringLeavesOutZeros) {
  KernelConfig config;
  config.block_q = 64;
  config.block_k = 64;
  config.num_warps = 4;
  config.platform = "cuda";
  EXPECT_EQ(config.DebugString(), "block_q=64 block_k=64 num_warps=4 platform=cuda");
  EXPECT_EQ(KernelConfig().DebugString(), "");
}

}  // namespace
}  // namespace kernelserve
