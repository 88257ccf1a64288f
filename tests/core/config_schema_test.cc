#include "core/config_schema.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// A platform with two fixed fields, a choice and a named field that took over num_warps.
const ConfigSchema& Toy() {
  static const ConfigSchema* const schema = new ConfigSchema{{
      IntConfigField("block_q", 16, 128, "none", "query rows per tile"),
      IntConfigField("block_size", 0, 64, "0: 32", "rows per chunk"),
      ChoiceConfigField("algorithm", {"split", "fused"}, "the plain kernel", "the variant"),
      IntConfigField("threads", 0, 8, "0: one per hardware thread", "worker threads",
                     /*replaces=*/"num_warps"),
  }};
  return *schema;
}

KernelConfig Valid() {
  KernelConfig config;
  config.block_q = 64;
  config.named["threads"] = 4;
  config.priority = 7;      // not a launch parameter: never checked
  config.platform = "cpu";  // checked by the platform, not the schema
  return config;
}

TEST(ConfigSchemaTest, FindsFieldsAndListsTheirNames) {
  EXPECT_EQ(Toy().FieldNames(), "block_q, block_size, algorithm, threads");
  EXPECT_EQ(ConfigSchema().FieldNames(), "none");
  ASSERT_NE(Toy().Find("threads"), nullptr);
  EXPECT_EQ(Toy().Find("threads")->replaces, "num_warps");
  EXPECT_EQ(Toy().Find("num_warps"), nullptr);
  EXPECT_EQ(ConfigFieldKindName(ConfigFieldKind::kInt), "int");
  EXPECT_EQ(ConfigFieldKindName(ConfigFieldKind::kChoice), "choice");
  EXPECT_TRUE(IsFixedConfigField("block_d"));
  EXPECT_TRUE(IsFixedConfigField("algorithm"));
  EXPECT_FALSE(IsFixedConfigField("threads"));
  EXPECT_FALSE(IsFixedConfigField("priority"));
}

TEST(ConfigSchemaTest, AcceptsDeclaredFieldsInRange) {
  EXPECT_TRUE(Toy().Check(Valid(), "toy on cpu").ok());
  KernelConfig config = Valid();
  config.algorithm = "fused";
  config.block_size = 64;
  EXPECT_TRUE(Toy().Check(config, "toy on cpu").ok());
  EXPECT_TRUE(ConfigSchema().Check(KernelConfig(), "empty").ok());
}

TEST(ConfigSchemaTest, OutOfRangeNamesTheFieldTheValueAndTheRange) {
  KernelConfig config = Valid();
  config.block_q = 8;
  absl::Status status = Toy().Check(config, "toy on cpu");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "config block_q=8 is out of range for toy on cpu: expected 16..128");
  config = Valid();
  config.named["threads"] = 1000000000;
  EXPECT_EQ(Toy().Check(config, "toy on cpu").message(),
            "config threads=1000000000 is out of range for toy on cpu: expected 0..8");
  config.named["threads"] = -1;
  EXPECT_EQ(Toy().Check(config, "toy on cpu").code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigSchemaTest, ChoiceMustBeOneOfTheChoices) {
  KernelConfig config = Valid();
  config.algorithm = "wgmma";
  absl::Status status = Toy().Check(config, "toy on cpu");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config algorithm='wgmma' is not a variant of toy on cpu: expected 'split', 'fused' "
            "or empty");
  config.algorithm = std::string(1000, 'x');
  EXPECT_LT(Toy().Check(config, "toy on cpu").message().size(), 200u);
}

TEST(ConfigSchemaTest, UndeclaredFixedFieldMustBeZero) {
  KernelConfig config = Valid();
  config.block_k = 3;
  absl::Status status = Toy().Check(config, "toy on cpu");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config block_k=3: block_k is not a field of toy on cpu (its fields: block_q, "
            "block_size, algorithm, threads)");
  KernelConfig algorithm;
  algorithm.algorithm = "split";
  EXPECT_EQ(ConfigSchema().Check(algorithm, "bare").message(),
            "config algorithm='split': algorithm is not a field of bare (its fields: none)");
}

TEST(ConfigSchemaTest, OldMeaningNamesTheNewField) {
  KernelConfig config = Valid();
  config.num_warps = 4;
  absl::Status status = Toy().Check(config, "toy on cpu");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config num_warps=4: num_warps is not a field of toy on cpu; the field for worker "
            "threads is 'threads' (0..8)");
}

TEST(ConfigSchemaTest, NamedFieldMustBeDeclared) {
  KernelConfig config = Valid();
  config.named["lanes"] = 2;
  absl::Status status = Toy().Check(config, "toy on cpu");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config 'lanes'=2: not a field of toy on cpu (its fields: block_q, block_size, "
            "algorithm, threads)");
  // A fixed field's name in the named map is refused too, even where the schema declares it.
  config = Valid();
  config.named["block_q"] = 64;
  EXPECT_EQ(Toy().Check(config, "toy on cpu").message(),
            "config 'block_q'=64: a fixed field set as a named one; not a field of toy on cpu (its "
            "fields: block_q, block_size, algorithm, threads)");
}

}  // namespace
}  // namespace kernelserve
