// Element types of tensors and conversions between the 16-bit and 8-bit floats and float.
#ifndef KERNELSERVE_CORE_DTYPE_H_
#define KERNELSERVE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kernelserve {

// kF8E4M3 and kF8E5M2 are the OCP 8-bit floats (1 byte each): E4M3 is the "fn" variant (no
// infinities, NaN = S.1111.111, max 448), E5M2 is IEEE-like (infinities, NaNs, max 57344).
// They are storage types (an fp8 KV cache): no kernel computes in them, see IsFloating.
enum class DType { kF32, kF16, kBF16, kI32, kI64, kBool, kF8E4M3, kF8E5M2 };

// Every DType, in the order of the enum.
inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16,  DType::kBF16,   DType::kI32,
                                       DType::kI64, DType::kBool, DType::kF8E4M3, DType::kF8E5M2};
// The names of kAllDTypes, for messages: "f32, f16, bf16, i32, i64, bool, f8_e4m3, f8_e5m2".
inline constexpr std::string_view kDTypeNames = "f32, f16, bf16, i32, i64, bool, f8_e4m3, f8_e5m2";

// Bytes per element (kBool, kF8E4M3, kF8E5M2: 1).
size_t ItemSize(DType dtype);
// "f32", "f16", "bf16", "i32", "i64", "bool", "f8_e4m3", "f8_e5m2".
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument naming the text for anything else.
absl::StatusOr<DType> ParseDType(std::string_view name);
// True for kF32, kF16 and kBF16: the dtypes kernels compute in. Not the fp8 types, which are
// storage only (a kernel gating on IsFloating refuses them).
bool IsFloating(DType dtype);
// True for kF8E4M3 and kF8E5M2.
bool IsFp8(DType dtype);
// True when elements are float values (IsFloating or IsFp8): Tensor::GetFloat / SetFloat
// convert them rather than truncating to integers, and they are data, not indices.
bool HoldsFloats(DType dtype);

// IEEE binary16 <-> float. Float to half rounds to nearest even; overflow gives infinity,
// NaN stays NaN.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
// bfloat16 <-> float, rounding to nearest even; NaN stays NaN.
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);
// OCP FP8 <-> float, float to fp8 as NVIDIA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)
// (PTX cvt.rn.satfinite): round to nearest, ties to even; a result past the largest finite
// value, infinities included, saturates to it with the sign kept (E4M3: +-448, E5M2:
// +-57344); NaN stays NaN (S.1111.111 for both, sign kept). Every code converts to float
// exactly (E5M2 infinities to infinities), so fp8 -> float -> fp8 gives the code back, a NaN
// aside (any E5M2 NaN comes back as S.11111.11).
uint8_t FloatToF8E4M3(float value);
float F8E4M3ToFloat(uint8_t bits);
uint8_t FloatToF8E5M2(float value);
float F8E5M2ToFloat(uint8_t bits);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_DTYPE_H_
