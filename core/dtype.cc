#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Shifts `value` right by `shift` bits, rounding the dropped bits to nearest, ties to even.
uint32_t ShiftRightRoundEven(uint32_t value, int shift) {
  if (shift <= 0) return value;
  if (shift >= 32) return 0;
  const uint32_t kept = value >> shift;
  const uint32_t dropped = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (dropped > half || (dropped == half && (kept & 1u))) return kept + 1;
  return kept;
}

// Float to an OCP fp8 format of `mantissa_bits` mantissa bits and exponent bias `bias` whose
// largest finite magnitude has code `max_finite` (sign bit clear); see FloatToF8E4M3.
uint8_t FloatToF8(float value, int mantissa_bits, int bias, uint8_t max_finite) {
  const uint32_t bits = FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const int exponent = static_cast<int>((bits >> 23) & 0xFFu);
  const uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFF) {
    if (mantissa != 0) return sign | 0x7Fu;  // NaN
    return sign | max_finite;                // infinity saturates
  }
  if (exponent == 0) return sign;  // float zero or subnormal: far below fp8's range
  const int f8_exponent = exponent - 127 + bias;
  if (f8_exponent >= 1) {
    // Normal: round the mantissa; a carry ripples into the exponent. Anything past the largest
    // finite code (E4M3's NaN code, E5M2's infinity and NaNs) saturates.
    const uint32_t combined = (static_cast<uint32_t>(f8_exponent) << 23) | mantissa;
    const uint32_t rounded = ShiftRightRoundEven(combined, 23 - mantissa_bits);
    if (rounded > max_finite) return sign | max_finite;
    return static_cast<uint8_t>(sign | rounded);
  }
  // Subnormal fp8 (or zero): value = significand * 2^(exponent - 150), in units of the
  // smallest subnormal 2^(1 - bias - mantissa_bits); may carry into the smallest normal.
  const uint32_t significand = mantissa | 0x800000u;
  const uint32_t rounded = ShiftRightRoundEven(significand, 151 - bias - mantissa_bits - exponent);
  return static_cast<uint8_t>(sign | rounded);
}

// The finite value of fp8 code `bits` (not NaN or infinity).
float FiniteF8ToFloat(uint8_t bits, int mantissa_bits, int bias) {
  const int exponent = (bits & 0x7F) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), 1 - bias - mantissa_bits)
                              : std::ldexp(static_cast<float>(mantissa | (1 << mantissa_bits)),
                                           exponent - bias - mantissa_bits);
  return (bits & 0x80u) != 0 ? -magnitude : magnitude;
}

}  // namespace

size_t ItemSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
    case DType::kF8E4M3:
      return "f8_e4m3";
    case DType::kF8E5M2:
      return "f8_e5m2";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", Sv(name), "'; expected one of ", Sv(kDTypeNames)));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

bool IsFp8(DType dtype) { return dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2; }

bool HoldsFloats(DType dtype) { return IsFloating(dtype) || IsFp8(dtype); }

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const int exponent = static_cast<int>((bits >> 23) & 0xFFu);
  const uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFF) {  // infinity or NaN; NaN keeps a quiet bit so it stays NaN
    if (mantissa == 0) return sign | 0x7C00u;
    return static_cast<uint16_t>(sign | 0x7E00u | (mantissa >> 13));
  }
  const int half_exponent = exponent - 127 + 15;
  if (half_exponent >= 0x1F) return sign | 0x7C00u;  // overflow
  if (half_exponent <= 0) {
    // Subnormal half (or zero): value = significand * 2^-24, significand including the
    // implicit bit of a normal float.
    if (exponent == 0) return sign;  // float zero or subnormal: far below half's range
    const uint32_t significand = mantissa | 0x800000u;
    // A normal float is significand * 2^(exponent - 150); dividing by 2^-24 needs a right
    // shift of 126 - exponent.
    const uint32_t rounded = ShiftRightRoundEven(significand, 126 - exponent);
    return static_cast<uint16_t>(sign | rounded);  // may carry into the smallest normal
  }
  // Normal: round the 23-bit mantissa to 10 bits; a carry ripples into the exponent and can
  // produce infinity, which is the right answer.
  const uint32_t combined = (static_cast<uint32_t>(half_exponent) << 23) | mantissa;
  const uint32_t rounded = ShiftRightRoundEven(combined, 13);
  if (rounded >= 0x7C00u) return sign | 0x7C00u;
  return static_cast<uint16_t>(sign | rounded);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    // Subnormal: normalise into a float exponent.
    int e = -1;
    do {
      mantissa <<= 1;
      ++e;
    } while ((mantissa & 0x400u) == 0);
    const uint32_t float_exponent = static_cast<uint32_t>(127 - 15 - e);
    return BitsToFloat(sign | (float_exponent << 23) | ((mantissa & 0x3FFu) << 13));
  }
  return BitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN, sign kept
  }
  // Rounding the low 16 bits may carry into the exponent; max finite rounds to infinity.
  return static_cast<uint16_t>(ShiftRightRoundEven(bits, 16));
}

float BFloat16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint8_t FloatToF8E4M3(float value) { return FloatToF8(value, 3, 7, 0x7E); }

float F8E4M3ToFloat(uint8_t bits) {
  if ((bits & 0x7Fu) == 0x7Fu) return BitsToFloat((bits & 0x80u) != 0 ? 0xFFC00000u : 0x7FC00000u);
  return FiniteF8ToFloat(bits, 3, 7);
}

uint8_t FloatToF8E5M2(float value) { return FloatToF8(value, 2, 15, 0x7B); }

float F8E5M2ToFloat(uint8_t bits) {
  if ((bits & 0x7Cu) == 0x7Cu) {  // exponent all ones
    const uint32_t sign = (bits & 0x80u) != 0 ? 0x80000000u : 0u;
    return BitsToFloat(sign | ((bits & 0x3u) == 0 ? 0x7F800000u : 0x7FC00000u));
  }
  return FiniteF8ToFloat(bits, 2, 15);
}

}  // namespace kernelserve
