#include "core/dtype.h"

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
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", Sv(name), "'; expected one of f32, f16, bf16, i32, i64, bool"));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

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

}  // namespace kernelserve
