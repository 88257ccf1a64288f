#include "core/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

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
  EXPECT_EQ(ItemSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(ItemSize(DType::kF8E5M2), 1u);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype : kAllDTypes) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, dtype);
    EXPECT_NE(kDTypeNames.find(DTypeName(dtype)), std::string_view::npos) << DTypeName(dtype);
  }
  EXPECT_EQ(std::size(kAllDTypes), 8u);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "f8_e4m3");
  EXPECT_EQ(DTypeName(DType::kF8E5M2), "f8_e5m2");
}

TEST(DTypeTest, ParseUnknownIsInvalidArgument) {
  absl::StatusOr<DType> parsed = ParseDType("float128");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("float128"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("f8_e4m3, f8_e5m2"), std::string::npos);
  // numpy's and ml_dtypes' spellings are not ours.
  EXPECT_FALSE(ParseDType("float8_e4m3fn").ok());
  EXPECT_FALSE(ParseDType("f8").ok());
}

TEST(DTypeTest, IsFloating) {
  EXPECT_TRUE(IsFloating(DType::kF32));
  EXPECT_TRUE(IsFloating(DType::kF16));
  EXPECT_TRUE(IsFloating(DType::kBF16));
  EXPECT_FALSE(IsFloating(DType::kI32));
  EXPECT_FALSE(IsFloating(DType::kI64));
  EXPECT_FALSE(IsFloating(DType::kBool));
  // fp8 is storage only: kernels that gate on IsFloating refuse it.
  EXPECT_FALSE(IsFloating(DType::kF8E4M3));
  EXPECT_FALSE(IsFloating(DType::kF8E5M2));
}

TEST(DTypeTest, IsFp8AndHoldsFloats) {
  for (DType dtype : kAllDTypes) {
    const bool fp8 = dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2;
    EXPECT_EQ(IsFp8(dtype), fp8) << DTypeName(dtype);
    EXPECT_EQ(HoldsFloats(dtype), fp8 || IsFloating(dtype)) << DTypeName(dtype);
  }
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

// The fp8 formats under test, as functions and facts.
struct F8Format {
  const char* name;
  uint8_t (*from_float)(float);
  float (*to_float)(uint8_t);
  uint8_t max_finite;  // code of the largest finite magnitude
  float max_value;
  int min_subnormal_exp;  // the smallest subnormal is 2^min_subnormal_exp
  bool has_inf;
};

const F8Format kE4M3 = {"e4m3", FloatToF8E4M3, F8E4M3ToFloat, 0x7E, 448.0f, -9, false};
const F8Format kE5M2 = {"e5m2", FloatToF8E5M2, F8E5M2ToFloat, 0x7B, 57344.0f, -16, true};

bool IsNanCode(const F8Format& f, uint8_t code) {
  return f.has_inf ? (code & 0x7C) == 0x7C && (code & 0x3) != 0 : (code & 0x7F) == 0x7F;
}

// The code nearest `value` by search over every finite code, ties to the even code, past
// the largest finite value saturating: what FloatTo* must agree with.
uint8_t NearestCode(const F8Format& f, float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= f.max_value) return sign | f.max_finite;
  uint8_t best = 0;
  double best_distance = magnitude;
  for (int code = 1; code <= f.max_finite; ++code) {
    const double distance = std::fabs(static_cast<double>(f.to_float(code)) - magnitude);
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = static_cast<uint8_t>(code);
      best_distance = distance;
    }
  }
  return sign | best;
}

class F8Test : public ::testing::TestWithParam<F8Format> {};

TEST_P(F8Test, KnownValues) {
  const F8Format& f = GetParam();
  EXPECT_EQ(f.to_float(f.max_finite), f.max_value);
  EXPECT_EQ(f.to_float(f.max_finite | 0x80), -f.max_value);
  EXPECT_EQ(f.to_float(0x01), std::ldexp(1.0f, f.min_subnormal_exp));
  EXPECT_EQ(f.from_float(std::ldexp(1.0f, f.min_subnormal_exp)), 0x01);
  EXPECT_EQ(f.from_float(0.0f), 0x00);
  EXPECT_EQ(f.from_float(-0.0f), 0x80);
  EXPECT_EQ(f.to_float(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(f.to_float(0x80)));
  EXPECT_EQ(f.to_float(f.from_float(1.0f)), 1.0f);
  EXPECT_EQ(f.to_float(f.from_float(-0.5f)), -0.5f);
}

TEST(F8CodesTest, KnownCodes) {
  EXPECT_EQ(FloatToF8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToF8E4M3(-2.0f), 0xC0);
  EXPECT_EQ(FloatToF8E4M3(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(F8E4M3ToFloat(0x07), std::ldexp(7.0f, -9));  // largest subnormal
  EXPECT_EQ(F8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x7D), 416.0f);
  EXPECT_EQ(FloatToF8E5M2(1.0f), 0x3C);
  EXPECT_EQ(FloatToF8E5M2(-2.0f), 0xC0);
  EXPECT_EQ(FloatToF8E5M2(std::ldexp(1.0f, -14)), 0x04);  // smallest normal
  EXPECT_EQ(F8E5M2ToFloat(0x03), std::ldexp(3.0f, -16));  // largest subnormal
  EXPECT_EQ(F8E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(F8E5M2ToFloat(0x7A), 49152.0f);
  // E4M3 has no infinity: S.1111.110 is a number, S.1111.111 the one NaN.
  EXPECT_FALSE(std::isinf(F8E4M3ToFloat(0x78)));
  EXPECT_EQ(F8E4M3ToFloat(0x78), 256.0f);
  EXPECT_TRUE(std::isnan(F8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(F8E4M3ToFloat(0xFF)));
  // E5M2 has both.
  EXPECT_EQ(F8E5M2ToFloat(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F8E5M2ToFloat(0xFC), -std::numeric_limits<float>::infinity());
  for (uint8_t nan : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(F8E5M2ToFloat(nan))) << static_cast<int>(nan);
  }
}

// Every one of the 256 codes: fp8 -> float -> fp8 gives the code back (a NaN gives NaN, the
// canonical S.1111.111 code), and the positive codes' values increase strictly.
TEST_P(F8Test, AllCodesRoundTrip) {
  const F8Format& f = GetParam();
  float previous = -1.0f;
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const float value = f.to_float(c);
    if (IsNanCode(f, c)) {
      ASSERT_TRUE(std::isnan(value)) << f.name << " code " << code;
      ASSERT_EQ(std::signbit(value), (c & 0x80) != 0) << f.name << " code " << code;
      ASSERT_EQ(f.from_float(value), (c & 0x80) | 0x7F) << f.name << " code " << code;
      continue;
    }
    ASSERT_FALSE(std::isnan(value)) << f.name << " code " << code;
    ASSERT_EQ(std::signbit(value), (c & 0x80) != 0) << f.name << " code " << code;
    if (std::isinf(value)) {
      ASSERT_TRUE(f.has_inf);
      // Saturating conversion: infinity comes back as the largest finite value.
      ASSERT_EQ(f.from_float(value), (c & 0x80) | f.max_finite) << f.name << " code " << code;
      continue;
    }
    ASSERT_EQ(f.from_float(value), c) << f.name << " code " << code << " value " << value;
    if (code < 0x80 && code <= f.max_finite) {
      ASSERT_GT(value, previous) << f.name << " code " << code;
      previous = value;
    }
  }
}

// Between every two adjacent finite codes (and their negatives): the midpoint ties to the
// even code, a float just above or below it rounds to the nearer code.
TEST_P(F8Test, MidpointsRoundToNearestEven) {
  const F8Format& f = GetParam();
  for (int code = 0; code < f.max_finite; ++code) {
    const float lo = f.to_float(static_cast<uint8_t>(code));
    const float hi = f.to_float(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few significant bits
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const uint8_t even = (code & 1) == 0 ? code : code + 1;
    for (float sign : {1.0f, -1.0f}) {
      const uint8_t s = sign < 0 ? 0x80 : 0x00;
      ASSERT_EQ(f.from_float(sign * mid), s | even) << f.name << " mid of " << code;
      ASSERT_EQ(f.from_float(sign * std::nextafter(mid, hi)), s | (code + 1))
          << f.name << " above mid of " << code;
      ASSERT_EQ(f.from_float(sign * std::nextafter(mid, lo)), s | code)
          << f.name << " below mid of " << code;
    }
  }
}

TEST_P(F8Test, OverflowSaturatesToTheLargestFiniteValue) {
  const F8Format& f = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  // The largest value, halfway to the step past it (a tie), the step past it, and far past.
  const float step = f.max_value - f.to_float(f.max_finite - 1);
  for (float value : {f.max_value, f.max_value + step / 2, f.max_value + step,
                      std::nextafter(f.max_value + step, inf), f.max_value * 4, 1e30f,
                      std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(f.from_float(value), f.max_finite) << f.name << " " << value;
    EXPECT_EQ(f.from_float(-value), 0x80 | f.max_finite) << f.name << " " << -value;
  }
}

TEST_P(F8Test, NanStaysNan) {
  const F8Format& f = GetParam();
  EXPECT_EQ(f.from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f.from_float(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  // Payload only in the low bits: must not become infinity or the largest value.
  EXPECT_EQ(f.from_float(FromBits(0x7F800001u)), 0x7F);
  EXPECT_EQ(f.from_float(FromBits(0xFFFFFFFFu)), 0xFF);
  EXPECT_TRUE(std::isnan(f.to_float(f.from_float(std::nanf("")))));
}

TEST_P(F8Test, BelowTheSmallestSubnormal) {
  const F8Format& f = GetParam();
  const float tiny = std::ldexp(1.0f, f.min_subnormal_exp);
  EXPECT_EQ(f.from_float(tiny / 2), 0x00);  // the tie goes to zero, the even code
  EXPECT_EQ(f.from_float(-tiny / 2), 0x80);
  EXPECT_EQ(f.from_float(std::nextafter(tiny / 2, 1.0f)), 0x01);
  EXPECT_EQ(f.from_float(tiny / 4), 0x00);
  EXPECT_EQ(f.from_float(1e-30f), 0x00);
  EXPECT_EQ(f.from_float(FromBits(0x00000001u)), 0x00);  // a float subnormal
  EXPECT_EQ(f.from_float(-FromBits(0x00000001u)), 0x80);
}

// Random floats over the whole range of magnitudes against a search for the nearest code.
TEST_P(F8Test, RandomFloatsMatchTheNearestCode) {
  const F8Format& f = GetParam();
  uint64_t state = 0x9E3779B97F4A7C15u;
  for (int i = 0; i < 50000; ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    const uint32_t r = static_cast<uint32_t>(state >> 32);
    // Exponents around fp8's range (2^-25 .. 2^20), any mantissa and sign.
    const int exponent = static_cast<int>((r >> 23) % 46) - 25 + 127;
    const float value = FromBits((r & 0x807FFFFFu) | (static_cast<uint32_t>(exponent) << 23));
    ASSERT_EQ(f.from_float(value), NearestCode(f, value)) << f.name << " " << value;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, F8Test, ::testing::Values(kE4M3, kE5M2),
                         [](const ::testing::TestParamInfo<F8Format>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace kernelserve
