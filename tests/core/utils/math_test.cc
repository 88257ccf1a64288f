#include "core/utils/math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LogSumExpTest, MatchesDirectFormula) {
  const std::vector<double> values = {0.5, -1.25, 2.0, 0.0};
  double direct = 0.0;
  for (double v : values) direct += std::exp(v);
  EXPECT_DOUBLE_EQ(LogSumExp(values), std::log(direct));
  const std::vector<float> floats = {0.5f, -1.25f, 2.0f, 0.0f};
  EXPECT_FLOAT_EQ(LogSumExp(floats), static_cast<float>(std::log(direct)));
}

TEST(LogSumExpTest, StableForLargeValues) {
  const std::vector<double> values = {1000.0, 1000.0};
  EXPECT_DOUBLE_EQ(LogSumExp(values), 1000.0 + std::log(2.0));
  const std::vector<float> floats = {-1000.0f, -1000.0f, -1000.0f};
  EXPECT_FLOAT_EQ(LogSumExp(floats), -1000.0f + static_cast<float>(std::log(3.0)));
}

TEST(LogSumExpTest, InfinitiesNeverNaN) {
  EXPECT_EQ(LogSumExp(std::vector<double>{-kInf, -kInf}), -kInf);
  EXPECT_EQ(LogSumExp(std::vector<double>{}), -kInf);
  EXPECT_DOUBLE_EQ(LogSumExp(std::vector<double>{-kInf, 3.0}), 3.0);
  EXPECT_EQ(LogSumExp(std::vector<double>{kInf, 1.0}), kInf);
  EXPECT_EQ(LogSumExp(std::vector<float>{-std::numeric_limits<float>::infinity()}),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(LogSumExp(std::vector<double>{1.0, std::nan("")})));
}

TEST(SafeDivideTest, ZeroDenominator) {
  EXPECT_EQ(SafeDivide(3.0, 0.0), 0.0);
  EXPECT_EQ(SafeDivide(3.0f, 0.0f), 0.0f);
  EXPECT_EQ(SafeDivide(3.0, 2.0), 1.5);
  EXPECT_EQ(SafeDivide(-1.0f, 4.0f), -0.25f);
}

TEST(CeilDivTest, Values) {
  EXPECT_EQ(CeilDiv(0, 4), 0);
  EXPECT_EQ(CeilDiv(8, 4), 2);
  EXPECT_EQ(CeilDiv(9, 4), 3);
}

TEST(SelectNumWarpsTest, Heuristic) {
  EXPECT_EQ(SelectNumWarps(128, 64, 128), 8);
  EXPECT_EQ(SelectNumWarps(128, 128, 64), 8);
  EXPECT_EQ(SelectNumWarps(128, 32, 64), 4);  // narrow tile
  EXPECT_EQ(SelectNumWarps(64, 64, 64), 4);
  EXPECT_EQ(SelectNumWarps(32, 64, 64), 2);  // only 2 row groups of 16
  EXPECT_EQ(SelectNumWarps(16, 16, 32), 1);
  EXPECT_EQ(SelectNumWarps(8, 16, 32), 1);
}

TEST(SelectNumStagesTest, Heuristic) {
  // A Q tile of 64 x head_dim stays resident; each stage holds a K and a V tile.
  EXPECT_EQ(SelectNumStages(128, DType::kBF16, 232448), 4);  // 227 KiB: plenty
  EXPECT_EQ(SelectNumStages(128, DType::kBF16, 49152), 1);   // 48 KiB: 16 KiB Q + one 32 KiB
  EXPECT_EQ(SelectNumStages(64, DType::kF16, 49152), 2);     // 8 KiB Q + 2 x 16 KiB
  EXPECT_EQ(SelectNumStages(128, DType::kF32, 166912), 2);   // 32 KiB Q + 2 x 64 KiB
  EXPECT_EQ(SelectNumStages(256, DType::kF32, 100000), 1);   // nothing fits: still 1
  EXPECT_EQ(SelectNumStages(64, DType::kBF16, 0), 1);        // CPU: no shared memory
}

}  // namespace
}  // namespace kernelserve
