// Element types of tensors and conversions between the 16-bit floats and float.
#ifndef KERNELSERVE_CORE_DTYPE_H_
#define KERNELSERVE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kernelserve {

enum class DType { kF32, kF16, kBF16, kI32, kI64, kBool };

// Bytes per element (kBool: 1).
size_t ItemSize(DType dtype);
// "f32", "f16", "bf16", "i32", "i64", "bool".
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument naming the text for anything else.
absl::StatusOr<DType> ParseDType(std::string_view name);
// True for kF32, kF16 and kBF16.
bool IsFloating(DType dtype);

// IEEE binary16 <-> float. Float to half rounds to nearest even; overflow gives infinity,
// NaN stays NaN.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
// bfloat16 <-> float, rounding to nearest even; NaN stays NaN.
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_DTYPE_H_
