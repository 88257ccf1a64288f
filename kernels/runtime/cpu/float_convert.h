// Conversions between the floating tensor element types and float for the CPU kernels.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_

#include <cstdint>

#include "core/dtype.h"

namespace kernelserve::cpu {

// dst[i] = element (offset + i) of `src` as float, for i in [0, n).
// REQUIRES: dtype is kF32, kF16 or kBF16; `src` holds at least offset + n elements.
void LoadAsFloat(DType dtype, const void* src, int64_t offset, int64_t n, float* dst);

// Element (offset + i) of `dst` = src[i] rounded to `dtype` (nearest even), for i in [0, n).
// REQUIRES: dtype is kF32, kF16 or kBF16; `dst` holds at least offset + n elements.
void StoreFromFloat(DType dtype, const float* src, int64_t n, void* dst, int64_t offset);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_FLOAT_CONVERT_H_
