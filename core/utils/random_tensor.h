// Seeded random tensors: inputs for the CLI's runs and benchmarks, and for tests.
#ifndef KERNELSERVE_CORE_UTILS_RANDOM_TENSOR_H_
#define KERNELSERVE_CORE_UTILS_RANDOM_TENSOR_H_

#include <cstdint>

#include "core/tensor.h"

namespace kernelserve {

// A tensor of `shape` with values drawn uniform in [lo, hi), then rounded to `dtype`. Integer
// dtypes get integers uniform in [ceil(lo), floor(hi)] (or lo when that range is empty); kBool gets
// 0/1 with equal odds. REQUIRES: shape valid.
Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, float lo = -1.0f,
                    float hi = 1.0f);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_RANDOM_TENSOR_H_
