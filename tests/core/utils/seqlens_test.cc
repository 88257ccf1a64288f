#include "core/utils/seqlens.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

using Ints = std::vector<int64_t>;

Tensor ExampleMask(DType dtype) {
  return Tensor::FromInts(dtype, {2, 4}, {1, 1, 1, 0, 1, 1, 0, 0});
}

TEST(PrepareLensTest, Example) {
  EXPECT_EQ(PrepareLens(Ints{0, 5, 12, 18}).value(), (Ints{5, 7, 6}));
  EXPECT_EQ(PrepareLens(Ints{0}).value(), Ints{});
  EXPECT_EQ(PrepareLens(Ints{0, 0, 3}).value(), (Ints{0, 3}));
}

TEST(PrepareLensTest, FromTensors) {
  EXPECT_EQ(PrepareLens(Tensor::FromInts(DType::kI32, {4}, {0, 5, 12, 18})).value(),
            (Ints{5, 7, 6}));
  EXPECT_EQ(PrepareLens(Tensor::FromInts(DType::kI64, {4}, {0, 5, 12, 18})).value(),
            (Ints{5, 7, 6}));
  EXPECT_EQ(PrepareLens(Tensor::FromFloats(DType::kF32, {2}, {0, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareLens(Tensor::FromInts(DType::kI32, {1, 2}, {0, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PrepareLensTest, Errors) {
  absl::StatusOr<Ints> not_zero = PrepareLens(Ints{1, 5});
  EXPECT_EQ(not_zero.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Ints> decreasing = PrepareLens(Ints{0, 5, 4, 9});
  ASSERT_EQ(decreasing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decreasing.status().message().find("cu_seqlens[2] = 4"), std::string::npos)
      << decreasing.status();
  EXPECT_EQ(PrepareLens(Ints{}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CuSeqlensFromLensTest, RoundTrip) {
  EXPECT_EQ(CuSeqlensFromLens({5, 7, 6}).value(), (Ints{0, 5, 12, 18}));
  EXPECT_EQ(PrepareLens(CuSeqlensFromLens({3, 0, 9}).value()).value(), (Ints{3, 0, 9}));
  EXPECT_EQ(CuSeqlensFromLens({2, -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CuSeqlensFromLens({INT64_MAX, 1}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MaskTest, Example) {
  for (DType dtype : {DType::kBool, DType::kI32, DType::kI64}) {
    EXPECT_EQ(LensFromMask(ExampleMask(dtype)).value(), (Ints{3, 2})) << DTypeName(dtype);
    EXPECT_EQ(CuSeqlensFromMask(ExampleMask(dtype)).value(), (Ints{0, 3, 5}));
  }
}

TEST(MaskTest, CountsPresentTokensAnywhere) {
  Tensor mask = Tensor::FromInts(DType::kBool, {3, 3}, {0, 1, 1, 0, 0, 0, 1, 1, 1});
  EXPECT_EQ(LensFromMask(mask).value(), (Ints{2, 0, 3}));
}

TEST(MaskTest, Errors) {
  EXPECT_EQ(LensFromMask(Tensor::Zeros(DType::kF32, {2, 4})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CuSeqlensFromMask(Tensor::Zeros(DType::kBool, {8})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateCuSeqlensTest, Valid) {
  EXPECT_TRUE(ValidateCuSeqlens(Ints{0, 5, 12, 18}, 18).ok());
  EXPECT_TRUE(ValidateCuSeqlens(Ints{0, 5, 12, 18}, 20).ok());  // trailing padding allowed
  EXPECT_TRUE(ValidateCuSeqlens(Ints{0}, 0).ok());
  EXPECT_TRUE(ValidateCuSeqlens(Tensor::FromInts(DType::kI32, {3}, {0, 3, 5}), 5).ok());
}

TEST(ValidateCuSeqlensTest, NamesFirstBadIndexAndValue) {
  absl::Status start = ValidateCuSeqlens(Ints{2, 5}, 10);
  EXPECT_EQ(start.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(start.message().find("cu_seqlens[0] = 2"), std::string::npos) << start;

  absl::Status decreasing = ValidateCuSeqlens(Ints{0, 5, 3, 1}, 10);
  EXPECT_EQ(decreasing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decreasing.message().find("cu_seqlens[2] = 3"), std::string::npos) << decreasing;

  absl::Status too_far = ValidateCuSeqlens(Ints{0, 5, 12, 19}, 18);
  EXPECT_EQ(too_far.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_far.message().find("cu_seqlens[3] = 19"), std::string::npos) << too_far;
  EXPECT_NE(too_far.message().find("18"), std::string::npos) << too_far;

  EXPECT_EQ(ValidateCuSeqlens(Ints{}, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateCuSeqlens(Tensor::FromInts(DType::kI64, {3}, {0, 4, 2}), 5).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateCuSeqlens(Tensor::Zeros(DType::kBool, {3}), 5).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
