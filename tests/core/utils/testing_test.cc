#include "tests/support/testing.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

TEST(AllCloseTest, WithinTolerance) {
  const std::vector<double> expected = {1.0, -2.0, 100.0};
  const std::vector<double> actual = {1.0 + 1e-6, -2.0 - 1e-6, 100.0 + 1e-4};
  AllCloseResult r = AllClose(actual, expected, /*rtol=*/1e-5, /*atol=*/1e-6);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_TRUE(r.message.empty());
  EXPECT_EQ(r.worst_index, -1);
  EXPECT_NEAR(r.max_abs_error, 1e-4, 1e-9);
}

TEST(AllCloseTest, NamesWorstIndex) {
  const std::vector<double> expected = {1.0, 2.0, 3.0, 4.0};
  const std::vector<double> actual = {1.1, 2.0, 3.5, 4.2};
  AllCloseResult r = AllClose(actual, expected, 0.0, 0.05);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 3);
  EXPECT_EQ(r.worst_index, 2);
  EXPECT_NE(r.message.find("index 2"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("3.5"), std::string::npos) << r.message;
  EXPECT_NEAR(r.max_abs_error, 0.5, 1e-12);
}

TEST(AllCloseTest, RelativeToleranceScalesWithExpected) {
  // |diff| = 1 passes at expected 1000 with rtol 1e-3 but not at expected 10.
  EXPECT_TRUE(AllClose(std::vector<double>{1001.0}, std::vector<double>{1000.0}, 1e-3, 0).ok);
  EXPECT_FALSE(AllClose(std::vector<double>{11.0}, std::vector<double>{10.0}, 1e-3, 0).ok);
}

TEST(AllCloseTest, NaNAndInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::nan("");
  EXPECT_FALSE(AllClose(std::vector<double>{nan}, std::vector<double>{1.0}, 1, 1).ok);
  EXPECT_FALSE(AllClose(std::vector<double>{nan}, std::vector<double>{nan}, 1, 1).ok);
  EXPECT_TRUE(AllClose(std::vector<double>{inf, -inf}, std::vector<double>{inf, -inf}, 0, 0).ok);
  EXPECT_FALSE(AllClose(std::vector<double>{inf}, std::vector<double>{-inf}, 1, 1).ok);
  EXPECT_FALSE(AllClose(std::vector<double>{1e300}, std::vector<double>{inf}, 1, 1).ok);
}

TEST(AllCloseTest, TensorsAndShapes) {
  const Tensor a = Tensor::FromFloats(DType::kF32, {2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::FromFloats(DType::kBF16, {2, 2}, {1, 2, 3, 4.0625f});  // exact in bf16
  EXPECT_TRUE(AllClose(a, b, 0, 0.07).ok);
  AllCloseResult r = AllClose(a, b, 0, 0.05);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_index, 3);
  AllCloseResult shape = AllClose(a, Tensor::FromFloats(DType::kF32, {4}, {1, 2, 3, 4}), 1, 1);
  EXPECT_FALSE(shape.ok);
  EXPECT_NE(shape.message.find("[2,2]"), std::string::npos) << shape.message;
  EXPECT_FALSE(AllClose(std::vector<float>{1, 2}, std::vector<float>{1}, 1, 1).ok);
}

TEST(RelativeErrorTest, Norms) {
  const std::vector<double> b = {3.0, 4.0};              // ||b|| = 5
  const std::vector<double> a = {3.0 + 0.3, 4.0 + 0.4};  // ||a - b|| = 0.5
  EXPECT_DOUBLE_EQ(RelativeError(a, b), 0.1);
  EXPECT_EQ(RelativeError(b, b), 0.0);
  const std::vector<double> zeros = {0.0, 0.0};
  EXPECT_EQ(RelativeError(zeros, zeros), 0.0);
  EXPECT_TRUE(std::isinf(RelativeError(b, zeros)));
  EXPECT_TRUE(std::isinf(RelativeError(std::vector<double>{1.0}, b)));
  const Tensor ta = Tensor::FromFloats(DType::kF32, {2}, {3.3f, 4.4f});
  const Tensor tb = Tensor::FromFloats(DType::kF32, {2}, {3.0f, 4.0f});
  EXPECT_NEAR(RelativeError(ta, tb), 0.1, 1e-6);
}

TEST(RandomTensorTest, DeterministicAndInRange) {
  const Tensor a = RandomTensor(DType::kF32, {4, 64}, 7, -2.0f, 3.0f);
  const Tensor b = RandomTensor(DType::kF32, {4, 64}, 7, -2.0f, 3.0f);
  const Tensor c = RandomTensor(DType::kF32, {4, 64}, 8, -2.0f, 3.0f);
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_NE(a.bytes(), c.bytes());
  double sum = 0.0;
  for (float v : a.ToFloats()) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LE(v, 3.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / 256, 0.5, 0.3);  // mean of U(-2, 3) is 0.5; 256 draws: sd ~0.09
}

TEST(RandomTensorTest, OtherDTypes) {
  const Tensor h = RandomTensor(DType::kBF16, {100}, 1);
  for (float v : h.ToFloats()) EXPECT_EQ(v, BFloat16ToFloat(FloatToBFloat16(v)));
  const Tensor i = RandomTensor(DType::kI32, {200}, 2, 0.0f, 5.0f);
  std::vector<int> counts(6, 0);
  for (int64_t v : i.ToInts()) {
    ASSERT_GE(v, 0);
    ASSERT_LE(v, 5);
    ++counts[static_cast<size_t>(v)];
  }
  for (int c : counts) EXPECT_GT(c, 0);
  const Tensor m = RandomTensor(DType::kBool, {200}, 3);
  int ones = 0;
  for (int64_t v : m.ToInts()) ones += static_cast<int>(v);
  EXPECT_GT(ones, 50);
  EXPECT_LT(ones, 150);
}

TEST(RandomAttentionInputsTest, Shapes) {
  AttentionInputsOptions o;
  o.B = 2;
  o.Sq = 5;
  o.Sk = 9;
  o.Hq = 8;
  o.Hkv = 2;
  o.D = 16;
  o.dtype = DType::kF16;
  o.seed = 11;
  const TensorMap in = RandomAttentionInputs(o);
  ASSERT_EQ(in.size(), 3u);
  EXPECT_EQ(in.at("q").spec(), (TensorSpec{DType::kF16, {2, 5, 8, 16}}));
  EXPECT_EQ(in.at("k").spec(), (TensorSpec{DType::kF16, {2, 9, 2, 16}}));
  EXPECT_EQ(in.at("v").spec(), (TensorSpec{DType::kF16, {2, 9, 2, 16}}));
  EXPECT_NE(in.at("k").bytes(), in.at("v").bytes());
  EXPECT_EQ(RandomAttentionInputs(o).at("q").bytes(), in.at("q").bytes());
  double sq = 0.0;
  for (double v : in.at("q").ToDoubles()) sq += v * v;
  EXPECT_GT(sq, 0.0);
}

}  // namespace
}  // namespace kernelserve
