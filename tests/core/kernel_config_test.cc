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
  EXPECT_NE(json.find("\"schema\":1"), std::string::npos);
  const std::vector<std::string> keys = {"algorithm", "backend",    "block_d",    "block_k",
                                         "block_q",   "block_size", "num_stages", "num_warps",
                                         "platform",  "priority",   "schema"};
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
      KernelConfig::FromJson(R"({"schema":1,"block_q":32,"future_field":[1,2]})");
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

TEST(KernelConfigTest, OtherSchemaIsInvalidArgument) {
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":2,"block_q":32})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"block_q":32})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelConfigTest, WrongFieldTypeIsInvalidArgument) {
  absl::StatusOr<KernelConfig> config = KernelConfig::FromJson(R"({"schema":1,"block_q":"64"})");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("block_q"), std::string::npos);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":1,"platform":3})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":1,"num_warps":4.5})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelConfig::FromJson(R"({"schema":1,"block_k":99999999999})").status().code(),
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

TEST(CheckConfigFieldsTest, NamesTheFieldTheValueAndTheRange) {
  static constexpr ConfigFieldRange kRanges[] = {{"block_q", &KernelConfig::block_q, 16, 128},
                                                 {"num_warps", &KernelConfig::num_warps, 0, 8}};
  KernelConfig config;
  config.block_q = 64;
  config.num_warps = 4;
  config.priority = 7;  // not a launch parameter: never checked
  EXPECT_TRUE(CheckConfigFields(config, "toy on cpu", kRanges).ok());
  config.num_warps = 1000000000;
  absl::Status status = CheckConfigFields(config, "toy on cpu", kRanges);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config num_warps=1000000000 is out of range for toy on cpu: expected 0..8");
  config.num_warps = 0;
  config.block_q = 8;
  EXPECT_EQ(CheckConfigFields(config, "toy on cpu", kRanges).message(),
            "config block_q=8 is out of range for toy on cpu: expected 16..128");
  config.block_q = 16;
  config.block_size = 3;
  EXPECT_EQ(CheckConfigFields(config, "toy on cpu", kRanges).message(),
            "config block_size=3: toy on cpu does not use block_size (expected 0)");
}

}  // namespace
}  // namespace kernelserve
