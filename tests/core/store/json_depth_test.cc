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

TEST(CheckJsonDepthTest, NamesWhatAndTheLimit) {
  const absl::Status status = CheckJsonDepth(std::string(100, '['), "stored config");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "stored config: JSON nested more than 64 levels deep");
}

}  // namespace
}  // namespace kernelserve
