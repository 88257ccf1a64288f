#include "core/store/json_depth.h"

#include <string>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

TEST(CheckJsonDepthTest, CountsArraysAndObjects) {
  EXPECT_TRUE(CheckJsonDepth(R"({"a":[{"b":[1]}]})", "v", 4).ok());
  EXPECT_EQ(CheckJsonDepth(R"({"a":[{"b":[1]}]})", "v", 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckJsonDepth("[[],[],[]]", "v", 2).ok());
  EXPECT_TRUE(CheckJsonDepth("", "v", 0).ok());
}

TEST(CheckJsonDepthTest, IgnoresBracketsInStrings) {
  EXPECT_TRUE(CheckJsonDepth(R"(["[[[{{{", "\"[[[", "\\"])", "v", 1).ok());
  EXPECT_EQ(CheckJsonDepth(R"(["\\", [[]]])", "v", 2).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckJsonDepthTest, DefaultLimitTakes64LevelsAndRefuses65) {
  ASSERT_EQ(kMaxJsonDepth, 64);
  const auto nested = [](int levels) {
    return std::string(levels, '[') + std::string(levels, ']');
  };
  EXPECT_TRUE(CheckJsonDepth(nested(64), "v").ok());
  EXPECT_TRUE(CheckJsonDepth(R"({"a":)" + nested(63) + "}", "v").ok());
  const absl::Status deeper = CheckJsonDepth(nested(65), "v");
  EXPECT_EQ(deeper.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(deeper.message(), "v: JSON nested more than 64 levels deep");
  EXPECT_EQ(CheckJsonDepth(R"({"a":)" + nested(64) + "}", "v").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckJsonDepthTest, NamesWhatAndTheLimit) {
  const absl::Status status = CheckJsonDepth(std::string(100, '['), "stored config");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "stored config: JSON nested more than 64 levels deep");
}

}  // namespace
}  // namespace kernelserve
