#include "core/tensor.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

TEST(ShapeTest, ShapeString) {
  EXPECT_EQ(ShapeString({2, 3, 4}), "[2,3,4]");
  EXPECT_EQ(ShapeString({}), "[]");
}

TEST(ShapeTest, NumElements) {
  EXPECT_EQ(NumElements({2, 3, 4}).value(), 24);
  EXPECT_EQ(NumElements({}).value(), 1);
  EXPECT_EQ(NumElements({5, 0, 7}).value(), 0);
}

TEST(ShapeTest, NegativeDimIsInvalidArgument) {
  absl::StatusOr<int64_t> n = NumElements({2, -1});
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShapeTest, OverflowIsInvalidArgument) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(NumElements({big, big}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(NumElements({big, big / 4 - 1}).ok());
}

TEST(TensorSpecTest, BytesAreCountedAndOverflowsSaturate) {
  EXPECT_EQ(*SpecBytes(TensorSpec{DType::kBF16, {3, 5, 7}}), 210);
  EXPECT_EQ(*SpecBytes(TensorSpec{DType::kF32, {}}), 4);
  const Shape huge = {int64_t{1} << 40, int64_t{1} << 22};
  EXPECT_EQ(SpecBytes(TensorSpec{DType::kF32, huge}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecBytes(TensorSpec{DType::kF32, {2, -1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecsBytes({{"a", {DType::kF16, {10}}}, {"b", {DType::kI64, {3}}}}), 44);
  EXPECT_EQ(SpecsBytes({{"a", {DType::kF16, {10}}}, {"b", {DType::kF32, huge}}}), INT64_MAX);
  EXPECT_EQ(SpecsBytes({}), 0);
}

TEST(TensorSpecTest, DebugString) {
  TensorSpec spec{DType::kBF16, {2, 3, 4}};
  EXPECT_EQ(spec.DebugString(), "bf16[2,3,4]");
}

TEST(TensorTest, EmptyAndZeros) {
  Tensor t = Tensor::Empty(DType::kF16, {2, 3});
  EXPECT_EQ(t.nbytes(), 12u);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.dim(1), 3);
  Tensor z = Tensor::Zeros(DType::kI64, {4});
  EXPECT_EQ(z.nbytes(), 32u);
  EXPECT_EQ(z.ToInts(), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(TensorTest, FromBytesChecksSize) {
  absl::StatusOr<Tensor> bad = Tensor::FromBytes(DType::kF32, {2, 2}, std::string(15, '\0'));
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("16"), std::string::npos);
  EXPECT_NE(bad.status().message().find("15"), std::string::npos);
  EXPECT_EQ(Tensor::FromBytes(DType::kF32, {-2, 2}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(Tensor::FromBytes(DType::kF32, {big}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, FromBytesTakesBytes) {
  std::string bytes(8, '\0');
  const float values[2] = {1.5f, -3.25f};
  std::memcpy(bytes.data(), values, sizeof(values));
  absl::StatusOr<Tensor> t = Tensor::FromBytes(DType::kF32, {2}, bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToFloats(), (std::vector<float>{1.5f, -3.25f}));
  EXPECT_EQ(std::move(*t).ReleaseBytes(), bytes);
}

TEST(TensorTest, FloatsThroughEachDType) {
  const std::vector<float> values = {1.0f, -2.5f, 0.333f, 100.0f};
  EXPECT_EQ(Tensor::FromFloats(DType::kF32, {4}, values).ToFloats(), values);
  Tensor h = Tensor::FromFloats(DType::kF16, {2, 2}, values);
  EXPECT_EQ(h.data_as<uint16_t>()[0], FloatToHalf(1.0f));
  EXPECT_EQ(h.GetFloat(2), HalfToFloat(FloatToHalf(0.333f)));
  EXPECT_NE(h.GetFloat(2), 0.333f);  // the value really went through f16
  Tensor b = Tensor::FromFloats(DType::kBF16, {4}, values);
  EXPECT_EQ(b.GetFloat(2), BFloat16ToFloat(FloatToBFloat16(0.333f)));
  EXPECT_EQ(b.GetFloat(1), -2.5f);
  Tensor i = Tensor::FromFloats(DType::kI32, {4}, values);
  EXPECT_EQ(i.ToInts(), (std::vector<int64_t>{1, -2, 0, 100}));
}

TEST(TensorTest, SetFloatGetFloat) {
  Tensor t = Tensor::Zeros(DType::kBF16, {3});
  t.SetFloat(1, 3.0f);
  EXPECT_EQ(t.GetFloat(1), 3.0f);
  EXPECT_EQ(t.GetFloat(0), 0.0f);
  Tensor m = Tensor::Zeros(DType::kBool, {2});
  m.SetFloat(1, 0.5f);
  EXPECT_EQ(m.GetInt(1), 1);
  EXPECT_EQ(m.GetInt(0), 0);
}

TEST(TensorTest, Fp8ElementsConvertAsFloats) {
  const std::vector<float> values = {1.0f, -2.5f, 0.333f, 1000.0f, 1e6f};
  Tensor e4 = Tensor::FromFloats(DType::kF8E4M3, {5}, values);
  EXPECT_EQ(e4.nbytes(), 5u);
  EXPECT_EQ(e4.data_as<uint8_t>()[0], 0x38);
  EXPECT_EQ(e4.GetFloat(1), -2.5f);
  EXPECT_EQ(e4.GetFloat(2), F8E4M3ToFloat(FloatToF8E4M3(0.333f)));
  EXPECT_NE(e4.GetFloat(2), 0.333f);  // the value really went through fp8
  EXPECT_EQ(e4.GetFloat(3), 448.0f);  // saturated, not NaN
  EXPECT_EQ(e4.GetFloat(4), 448.0f);
  Tensor e5 = Tensor::FromFloats(DType::kF8E5M2, {5}, values);
  EXPECT_EQ(e5.data_as<uint8_t>()[0], 0x3C);
  EXPECT_EQ(e5.GetFloat(3), 1024.0f);   // 1000 rounds to 1024 (2 mantissa bits)
  EXPECT_EQ(e5.GetFloat(4), 57344.0f);  // saturated, not infinity
  // ToDoubles and ToInts read the values, not the bits.
  EXPECT_EQ(e4.ToDoubles(), (std::vector<double>{1.0, -2.5, e4.GetFloat(2), 448.0, 448.0}));
  EXPECT_EQ(e5.ToInts(), (std::vector<int64_t>{1, -2, 0, 1024, 57344}));
  EXPECT_EQ(Tensor::FromInts(DType::kF8E4M3, {2}, {3, -100}).ToFloats(),
            (std::vector<float>{3.0f, -96.0f}));
  Tensor t = Tensor::Zeros(DType::kF8E5M2, {2});
  t.SetFloat(1, -0.75f);
  EXPECT_EQ(t.GetFloat(1), -0.75f);
  EXPECT_EQ(t.GetFloat(0), 0.0f);
  EXPECT_EQ((TensorSpec{DType::kF8E4M3, {2, 8}}).DebugString(), "f8_e4m3[2,8]");
  EXPECT_EQ(*SpecBytes(TensorSpec{DType::kF8E5M2, {3, 5, 7}}), 105);
}

TEST(TensorTest, IntsThroughEachDType) {
  const std::vector<int64_t> values = {0, 5, -7, int64_t{1} << 40};
  EXPECT_EQ(Tensor::FromInts(DType::kI64, {4}, values).ToInts(), values);
  Tensor i32 = Tensor::FromInts(DType::kI32, {3}, {0, 5, -7});
  EXPECT_EQ(i32.nbytes(), 12u);
  EXPECT_EQ(i32.ToInts(), (std::vector<int64_t>{0, 5, -7}));
  EXPECT_EQ(i32.ToDoubles(), (std::vector<double>{0.0, 5.0, -7.0}));
  Tensor mask = Tensor::FromInts(DType::kBool, {3}, {1, 0, 3});
  EXPECT_EQ(mask.ToInts(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(mask.ToFloats(), (std::vector<float>{1.0f, 0.0f, 1.0f}));
  Tensor f = Tensor::FromInts(DType::kF32, {2}, {3, -4});
  EXPECT_EQ(f.ToFloats(), (std::vector<float>{3.0f, -4.0f}));
}

TEST(TensorTest, ToDoublesKeepsLargeInts) {
  const int64_t big = (int64_t{1} << 40) + 1;  // not representable in float
  Tensor t = Tensor::FromInts(DType::kI64, {1}, {big});
  EXPECT_EQ(t.ToDoubles()[0], static_cast<double>(big));
}

// A heap buffer whose release is counted.
std::shared_ptr<HostBuffer> CountedBuffer(size_t bytes, int* released) {
  char* data = new char[bytes];
  return std::make_shared<HostBuffer>(data, bytes, /*pinned=*/true, [released](void* p) {
    delete[] static_cast<char*>(p);
    ++*released;
  });
}

TEST(TensorTest, FromBufferHoldsTheBufferAndReleasesItOnce) {
  int released = 0;
  {
    std::shared_ptr<HostBuffer> buffer = CountedBuffer(6 * sizeof(float), &released);
    void* data = buffer->data();
    absl::StatusOr<Tensor> t = Tensor::FromBuffer(DType::kF32, {2, 3}, std::move(buffer));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->data(), data) << "no copy";
    EXPECT_EQ(t->nbytes(), 24u);
    EXPECT_NE(t->buffer(), nullptr);
    t->SetFloat(5, 2.5f);
    Tensor moved = *std::move(t);
    EXPECT_EQ(moved.data(), data);
    EXPECT_EQ(moved.GetFloat(5), 2.5f);
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

TEST(TensorTest, FromBufferOfTheWrongSizeIsInvalidArgument) {
  int released = 0;
  absl::StatusOr<Tensor> t = Tensor::FromBuffer(DType::kF32, {2, 3}, CountedBuffer(20, &released));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("expected 24 bytes, got 20"), std::string::npos)
      << t.status();
  EXPECT_EQ(released, 1);
}

TEST(TensorTest, ACopyOfABufferTensorOwnsItsBytes) {
  int released = 0;
  Tensor original =
      *Tensor::FromBuffer(DType::kF32, {4}, CountedBuffer(4 * sizeof(float), &released));
  for (int i = 0; i < 4; ++i) original.SetFloat(i, static_cast<float>(i) + 0.5f);
  Tensor copy = original;
  EXPECT_NE(copy.data(), original.data());
  EXPECT_EQ(copy.buffer(), nullptr);
  EXPECT_EQ(copy.bytes(), original.bytes());
  copy.SetFloat(0, 9.0f);
  EXPECT_EQ(original.GetFloat(0), 0.5f);
  Tensor assigned;
  assigned = original;
  EXPECT_EQ(assigned.bytes(), original.bytes());
  EXPECT_NE(assigned.data(), original.data());
}

TEST(TensorTest, ReleaseBytesOfABufferTensorCopiesAndLetsTheBufferGo) {
  int released = 0;
  Tensor t = *Tensor::FromBuffer(DType::kI32, {3}, CountedBuffer(3 * sizeof(int32_t), &released));
  for (int i = 0; i < 3; ++i) t.data_as<int32_t>()[i] = 7 * i;
  const std::string expected(t.bytes());
  std::string bytes = std::move(t).ReleaseBytes();
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(released, 1);
}

TEST(TensorTest, SpecsOf) {
  TensorMap tensors;
  tensors["x"] = Tensor::Zeros(DType::kF16, {2, 8});
  tensors["lens"] = Tensor::Zeros(DType::kI32, {2});
  TensorSpecMap specs = SpecsOf(tensors);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs["x"], (TensorSpec{DType::kF16, {2, 8}}));
  EXPECT_EQ(specs["lens"], (TensorSpec{DType::kI32, {2}}));
}

}  // namespace
}  // namespace kernelserve
