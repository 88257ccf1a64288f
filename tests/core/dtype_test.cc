#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

TEST(DTypeTest, ItemSizes) {
  EXPECT_EQ(ItemSize(DType::kF32), 4u);
  EXPECT_EQ(ItemSize(DType::kF16), 2u);
  EXPECT_EQ(ItemSize(DType::kBF16), 2u);
  EXPECT_EQ(ItemSize(DType::kI32), 4u);
  EXPECT_EQ(ItemSize(DType::kI64), 8u);
  EXPECT_EQ(ItemSize(DType::kBool), 1u);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
}

TEST(DTypeTest, ParseUnknownIsInvalidArgument) {
  absl::StatusOr<DType> parsed = ParseDType("float128");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("float128"), std::string::npos);
}

TEST(DTypeTest, IsFloating) {
  EXPECT_TRUE(IsFloating(DType::kF32));
  EXPECT_TRUE(IsFloating(DType::kF16));
  EXPECT_TRUE(IsFloating(DType::kBF16));
  EXPECT_FALSE(IsFloating(DType::kI32));
  EXPECT_FALSE(IsFloating(DType::kI64));
  EXPECT_FALSE(IsFloating(DType::kBool));
}

TEST(HalfTest, ExactValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(HalfTest, OverflowGivesInfinity) {
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // halfway to 2^16 rounds to even: infinity
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);  // below halfway stays at max
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
}

TEST(HalfTest, Subnormals) {
  const float min_subnormal = std::ldexp(1.0f, -24);
  EXPECT_EQ(FloatToHalf(min_subnormal), 0x0001);
  EXPECT_EQ(HalfToFloat(0x0001), min_subnormal);
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  // Exactly half of the smallest subnormal ties to even (zero); a bit more rounds up.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  // 1.5 * 2^-24 ties between 1 and 2 units: even is 2.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(FloatToHalf(std::ldexp(2.5f, -24)), 0x0002);
  EXPECT_EQ(FloatToHalf(-std::ldexp(3.0f, -24)), 0x8003);
  // Far below half's range: signed zero.
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(-1e-30f), 0x8000);
}

TEST(HalfTest, NormalRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Slightly above halfway rounds up.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
}

TEST(HalfTest, NanStaysNan) {
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  // A NaN whose payload lives only in the low bits must not become infinity.
  const uint16_t half = FloatToHalf(FromBits(0x7F800001u));
  EXPECT_EQ(half & 0x7C00, 0x7C00);
  EXPECT_NE(half & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
}

TEST(HalfTest, AllFiniteHalvesRoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00) continue;  // inf / NaN
    ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << "bits 0x" << std::hex << bits;
  }
}

TEST(BFloat16Test, ExactValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xC000);
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0x7F7F), FromBits(0x7F7F0000u));
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
}

TEST(BFloat16Test, HalfwayRoundsToEven) {
  // 0x3F808000 lies exactly between 0x3F80 (even) and 0x3F81 (odd): down to 0x3F80.
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F808000u)), 0x3F80);
  // 0x3F818000 lies between 0x3F81 (odd) and 0x3F82 (even): up to 0x3F82.
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F807FFFu)), 0x3F80);
}

TEST(BFloat16Test, OverflowAndSubnormals) {
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00010000u)), 0x0001);              // subnormal kept
  EXPECT_EQ(BFloat16ToFloat(0x0001), FromBits(0x00010000u));
}

TEST(BFloat16Test, NanStaysNan) {
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  // Payload only in the low 16 bits: truncation alone would give infinity.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0xFFFFFFFFu)))));
}

}  // namespace
}  // namespace kernelserve
