// Conversions between the float tensor element types and float for the CPU kernels.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_

#include <cstdint>

#include "core/dtype.h"

namespace kernelserve::cpu {

// dst[i] = element (offset + i) of `src` as float, for i in [0, n).
// REQUIRES: HoldsFloats(dtype) (kF32, kF16, kBF16, kF8E4M3, kF8E5M2); `src` holds at least
// offset + n elements.
void LoadAsFloat(DType dtype, const void* src, int64_t offset, int64_t n, float* dst);

// Element (offset + i) of `dst` = src[i] rounded to `dtype` (nearest even; fp8 saturating, see
// FloatToF8E4M3), for i in [0, n).
// REQUIRES: HoldsFloats(dtype); `dst` holds at least offset + n elements.
void StoreFromFloat(DType dtype, const float* src, int64_t n, void* dst, int64_t offset);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_
