// Small numeric helpers and launch-parameter heuristics shared by the kernels.
//
// All functions are pure and thread-safe.
#ifndef KERNELSERVE_CORE_UTILS_MATH_H_
#define KERNELSERVE_CORE_UTILS_MATH_H_

#include <cstdint>

#include "absl/types/span.h"
#include "core/dtype.h"

namespace kernelserve {

// log(sum(exp(values))) computed around the maximum so that large values do not overflow.
// Empty input or all -inf -> -inf (never NaN); any +inf -> +inf; a NaN input gives NaN.
double LogSumExp(absl::Span<const double> values);
float LogSumExp(absl::Span<const float> values);

// a / b, or 0 when b == 0 (e.g. the mean of an empty sequence).
double SafeDivide(double a, double b);
float SafeDivide(float a, float b);

// Ceil(a / b) for a >= 0, b > 0.
int64_t CeilDiv(int64_t a, int64_t b);

// Warps per block for an attention tile of block_q x block_k scores and head_dim columns.
// Result is a power of two in [1, 8] and never more than block_q / 16 (at least 1).
// REQUIRES: arguments > 0.
int SelectNumWarps(int block_q, int block_k, int head_dim);

// Pipeline depth of the K/V copies for a head dimension and element type, given the shared
// memory a block may use. Result in [1, 4]. REQUIRES: head_dim > 0.
int SelectNumStages(int head_dim, DType dtype, int64_t shared_memory_bytes);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_MATH_H_
