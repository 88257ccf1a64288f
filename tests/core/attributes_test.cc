#include "core/attributes.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

Attributes Sample() {
  return {{"causal", true},
          {"window_left", int64_t{16}},
          {"soft_cap", 30.5},
          {"mode", std::string("mean")}};
}

TEST(AttributesTest, TypedReads) {
  const Attributes attrs = Sample();
  EXPECT_EQ(GetBoolAttr(attrs, "causal", false).value(), true);
  EXPECT_EQ(GetIntAttr(attrs, "window_left", -1).value(), 16);
  EXPECT_EQ(GetDoubleAttr(attrs, "soft_cap", 0.0).value(), 30.5);
  EXPECT_EQ(GetOptionalIntAttr(attrs, "window_left").value(), std::optional<int64_t>(16));
}

TEST(AttributesTest, AbsentGivesFallback) {
  const Attributes attrs = Sample();
  EXPECT_EQ(GetBoolAttr(attrs, "missing", true).value(), true);
  EXPECT_EQ(GetIntAttr(attrs, "missing", 7).value(), 7);
  EXPECT_EQ(GetDoubleAttr(attrs, "missing", 2.5).value(), 2.5);
  EXPECT_EQ(GetOptionalIntAttr(attrs, "missing").value(), std::nullopt);
}

TEST(AttributesTest, IntAcceptedAsDouble) {
  EXPECT_EQ(GetDoubleAttr(Sample(), "window_left", 0.0).value(), 16.0);
}

TEST(AttributesTest, WrongTypeIsInvalidArgument) {
  const Attributes attrs = Sample();
  absl::StatusOr<bool> b = GetBoolAttr(attrs, "window_left", false);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("window_left"), std::string::npos);
  EXPECT_NE(b.status().message().find("bool"), std::string::npos);
  EXPECT_EQ(GetIntAttr(attrs, "soft_cap", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetDoubleAttr(attrs, "mode", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetDoubleAttr(attrs, "causal", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetOptionalIntAttr(attrs, "causal").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AttributesTest, AttributesString) {
  const Attributes attrs = {{"causal", true}, {"window_left", int64_t{16}}};
  EXPECT_EQ(AttributesString(attrs), "{causal=true, window_left=16}");
  EXPECT_EQ(AttributesString({}), "{}");
  EXPECT_EQ(AttributesString({{"mode", std::string("x")}, {"scale", 0.5}}),
            "{mode=\"x\", scale=0.5}");
}

}  // namespace
}  // namespace kernelserve
