#include "core/utils/chunk.h"

#include "core/utils/testing.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

TEST(ChunkTest, PadsWithZeros) {
  // x [1,5,2] = 1..10, chunks of 2 -> [1,3,2,2] with the last position zero.
  std::vector<float> values;
  for (int i = 1; i <= 10; ++i) values.push_back(static_cast<float>(i));
  absl::StatusOr<Tensor> y = Chunk(Tensor::FromFloats(DType::kF32, {1, 5, 2}, values), 2);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{1, 3, 2, 2}));
  EXPECT_EQ(y->ToFloats(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0}));
}

TEST(ChunkTest, EachElementLandsInItsChunk) {
  const Tensor x = RandomTensor(DType::kBF16, {3, 7, 2, 3}, /*seed=*/5);
  absl::StatusOr<Tensor> y = Chunk(x, 3);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{3, 3, 3, 2, 3}));
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t s = 0; s < 9; ++s) {
      for (int64_t r = 0; r < 6; ++r) {
        const float got = y->GetFloat((b * 9 + s) * 6 + r);
        const float want = s < 7 ? x.GetFloat((b * 7 + s) * 6 + r) : 0.0f;
        ASSERT_EQ(got, want) << "b=" << b << " s=" << s << " r=" << r;
      }
    }
  }
}

TEST(ChunkTest, RoundTrip) {
  for (int64_t seq : {1, 6, 8, 13}) {
    for (int64_t chunk : {1, 4, 8, 20}) {
      const Tensor x = RandomTensor(DType::kF32, {2, seq, 5}, static_cast<uint64_t>(seq + chunk));
      absl::StatusOr<Tensor> y = Chunk(x, chunk);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(y->dim(1), (seq + chunk - 1) / chunk);
      absl::StatusOr<Tensor> back = Unchunk(*y, seq);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->shape(), x.shape());
      EXPECT_EQ(back->bytes(), x.bytes()) << "seq=" << seq << " chunk=" << chunk;
    }
  }
}

TEST(ChunkTest, RankTwoAndIntegers) {
  const Tensor x = Tensor::FromInts(DType::kI64, {2, 3}, {1, 2, 3, 4, 5, 6});
  absl::StatusOr<Tensor> y = Chunk(x, 2);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(y->ToInts(), (std::vector<int64_t>{1, 2, 3, 0, 4, 5, 6, 0}));
  EXPECT_EQ(Unchunk(*y, 3).value().ToInts(), x.ToInts());
}

TEST(ChunkTest, Errors) {
  EXPECT_EQ(Chunk(Tensor::Zeros(DType::kF32, {4}), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Chunk(Tensor::Zeros(DType::kF32, {1, 4}), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Tensor y = Tensor::Zeros(DType::kF32, {1, 3, 4});
  EXPECT_EQ(Unchunk(y, 8).status().code(), absl::StatusCode::kInvalidArgument);   // 2 chunks
  EXPECT_EQ(Unchunk(y, 13).status().code(), absl::StatusCode::kInvalidArgument);  // 4 chunks
  EXPECT_EQ(Unchunk(y, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Unchunk(y, 9).ok());
  EXPECT_EQ(Unchunk(Tensor::Zeros(DType::kF32, {3, 4}), 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
