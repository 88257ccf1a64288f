#include "core/utils/params.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

FwdParams Base() {
  FwdParams p;
  p.softmax_scale = 0.125f;
  p.window_left = 64;
  p.logits_soft_cap = 30.0f;
  p.chunk_size = 128;
  return p;
}

TEST(FwdParamsTest, MergeSetFieldsWin) {
  FwdParams over;
  over.causal = true;
  over.window_left = 8;
  over.window_right = 0;
  FwdParams merged = Merge(Base(), over);
  EXPECT_EQ(merged.softmax_scale, std::optional<float>(0.125f));  // kept from base
  EXPECT_TRUE(merged.causal);
  EXPECT_EQ(merged.window_left, std::optional<int>(8));
  EXPECT_EQ(merged.window_right, std::optional<int>(0));  // engaged zero is set
  EXPECT_EQ(merged.logits_soft_cap, 30.0f);
  EXPECT_EQ(merged.chunk_size, 128);
}

TEST(FwdParamsTest, MergeWithEmptyOverrideIsBase) {
  EXPECT_EQ(Merge(Base(), FwdParams()), Base());
  EXPECT_EQ(Merge(FwdParams(), Base()), Base());
  FwdParams over;
  over.softmax_scale = 0.5f;
  over.logits_soft_cap = 10.0f;
  over.chunk_size = 32;
  FwdParams merged = Merge(Base(), over);
  EXPECT_EQ(merged.softmax_scale, std::optional<float>(0.5f));
  EXPECT_EQ(merged.logits_soft_cap, 10.0f);
  EXPECT_EQ(merged.chunk_size, 32);
}

TEST(BwdParamsTest, MergeAndFromFwd) {
  BwdParams base = BwdFromFwd(Base());
  EXPECT_EQ(base.softmax_scale, std::optional<float>(0.125f));
  EXPECT_EQ(base.window_left, std::optional<int>(64));
  EXPECT_EQ(base.chunk_size, 128);
  EXPECT_FALSE(base.deterministic);
  BwdParams over;
  over.deterministic = true;
  over.window_right = 4;
  BwdParams merged = Merge(base, over);
  EXPECT_TRUE(merged.deterministic);
  EXPECT_EQ(merged.window_right, std::optional<int>(4));
  EXPECT_EQ(merged.window_left, std::optional<int>(64));
  EXPECT_EQ(Merge(base, BwdParams()), base);
}

TEST(ToAttributesTest, SetFieldsOnly) {
  EXPECT_TRUE(ToAttributes(FwdParams()).empty());
  FwdParams p = Base();
  p.causal = true;
  const Attributes attrs = ToAttributes(p);
  EXPECT_EQ(attrs.size(), 5u);
  EXPECT_EQ(std::get<double>(attrs.at("softmax_scale")), 0.125);
  EXPECT_EQ(std::get<bool>(attrs.at("causal")), true);
  EXPECT_EQ(std::get<int64_t>(attrs.at("window_left")), 64);
  EXPECT_EQ(attrs.count("window_right"), 0u);
  EXPECT_EQ(std::get<double>(attrs.at("logits_soft_cap")), 30.0);
  EXPECT_EQ(std::get<int64_t>(attrs.at("chunk_size")), 128);
}

TEST(ToAttributesTest, RoundTrip) {
  FwdParams p = Base();
  p.window_right = 0;
  absl::StatusOr<FwdParams> back = FwdParamsFromAttributes(ToAttributes(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(FwdParamsFromAttributes({}).value(), FwdParams());
}

TEST(ToAttributesTest, FromAttributesErrors) {
  EXPECT_EQ(FwdParamsFromAttributes({{"causal", int64_t{1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FwdParamsFromAttributes({{"window_left", 1.5}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FwdParamsFromAttributes({{"chunk_size", int64_t{1} << 40}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An integer scale is accepted as a double.
  EXPECT_EQ(FwdParamsFromAttributes({{"softmax_scale", int64_t{2}}}).value().softmax_scale,
            std::optional<float>(2.0f));
}

}  // namespace
}  // namespace kernelserve
