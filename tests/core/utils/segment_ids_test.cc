#include "core/utils/segment_ids.h"

#include <random>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

using Ints = std::vector<int64_t>;

// The mask by its definition, element by element.
Ints ExpectedMask(const Ints& q, const Ints& kv, int64_t batch) {
  const int64_t sq = static_cast<int64_t>(q.size()) / batch;
  const int64_t sk = static_cast<int64_t>(kv.size()) / batch;
  Ints mask;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        const int64_t qi = q[static_cast<size_t>(b * sq + i)];
        mask.push_back(qi > 0 && qi == kv[static_cast<size_t>(b * sk + j)] ? 1 : 0);
      }
    }
  }
  return mask;
}

TEST(SegmentIdsToMaskTest, SelfMask) {
  Tensor ids = Tensor::FromInts(DType::kI32, {1, 4}, {1, 1, 2, 0});
  absl::StatusOr<Tensor> mask = SegmentIdsToMask(ids);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->dtype(), DType::kBool);
  EXPECT_EQ(mask->shape(), (Shape{1, 4, 4}));
  EXPECT_EQ(mask->ToInts(), (Ints{1, 1, 0, 0,  //
                                  1, 1, 0, 0,  //
                                  0, 0, 1, 0,  //
                                  0, 0, 0, 0}));
}

TEST(SegmentIdsToMaskTest, CrossMaskMatchesDefinition) {
  const Ints q = {1, 2, 2, -1, 3, 3, 0, 1};
  const Ints kv = {2, 1, 1, 0, 2, 1, 3, 3, 3, -1};
  absl::StatusOr<Tensor> mask = SegmentIdsToMask(Tensor::FromInts(DType::kI64, {2, 4}, q),
                                                 Tensor::FromInts(DType::kI32, {2, 5}, kv));
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->shape(), (Shape{2, 4, 5}));
  EXPECT_EQ(mask->ToInts(), ExpectedMask(q, kv, 2));
  // Padding (0 and -1) never attends, not even to equal padding ids.
  EXPECT_EQ(mask->GetInt((1 * 4 + 2) * 5 + 4), 0);
}

TEST(SegmentIdsToMaskTest, Errors) {
  Tensor ids = Tensor::FromInts(DType::kI32, {2, 3}, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(SegmentIdsToMask(ids, Tensor::Zeros(DType::kI32, {3, 3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentIdsToMask(Tensor::Zeros(DType::kF32, {2, 3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentIdsToMask(Tensor::Zeros(DType::kI32, {6})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MaskToSegmentIdsTest, RenumbersInOrderOfFirstAppearance) {
  Tensor ids = Tensor::FromInts(DType::kI32, {2, 6},
                                {7, 7, 3, 3, 3, 0,  //
                                 0, 5, 5, 9, 5, -2});
  absl::StatusOr<Tensor> back = MaskToSegmentIds(SegmentIdsToMask(ids).value());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), DType::kI32);
  EXPECT_EQ(back->shape(), (Shape{2, 6}));
  EXPECT_EQ(back->ToInts(), (Ints{1, 1, 2, 2, 2, 0,  //
                                  0, 1, 1, 2, 1, 0}));
}

TEST(MaskToSegmentIdsTest, RandomRoundTripPreservesGrouping) {
  std::mt19937_64 rng(42);
  const int64_t batch = 3;
  const int64_t seq = 40;
  Ints ids(static_cast<size_t>(batch * seq));
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 6);  // 0 = padding, 1..5 segments
  absl::StatusOr<Tensor> mask = SegmentIdsToMask(Tensor::FromInts(DType::kI64, {batch, seq}, ids));
  ASSERT_TRUE(mask.ok()) << mask.status();
  absl::StatusOr<Tensor> back = MaskToSegmentIds(*mask);
  ASSERT_TRUE(back.ok()) << back.status();
  const Ints got = back->ToInts();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < seq; ++i) {
      const size_t bi = static_cast<size_t>(b * seq + i);
      EXPECT_EQ(got[bi] == 0, ids[bi] == 0) << "b=" << b << " i=" << i;
      for (int64_t j = 0; j < seq; ++j) {
        const size_t bj = static_cast<size_t>(b * seq + j);
        if (ids[bi] == 0 || ids[bj] == 0) continue;
        EXPECT_EQ(got[bi] == got[bj], ids[bi] == ids[bj]) << "b=" << b << " i=" << i << " j=" << j;
      }
    }
  }
  // And the recovered ids produce the same mask.
  EXPECT_EQ(SegmentIdsToMask(*back).value().ToInts(), mask->ToInts());
}

TEST(MaskToSegmentIdsTest, Errors) {
  EXPECT_EQ(MaskToSegmentIds(Tensor::Zeros(DType::kBool, {2, 3, 4})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaskToSegmentIds(Tensor::Zeros(DType::kF16, {2, 3, 3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaskToSegmentIds(Tensor::Zeros(DType::kBool, {3, 3})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
