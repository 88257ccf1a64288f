// Helpers for tests and benchmarks: tolerance checks, error norms and seeded attention inputs
// (RandomTensor is core/utils/random_tensor.h).
//
// Plain C++ with no test-framework dependency, so kernels' tests and benchmarks can both use
// it. All functions are pure (random ones are deterministic in their seed) and thread-safe.
#ifndef KERNELSERVE_TESTS_SUPPORT_TESTING_H_
#define KERNELSERVE_TESTS_SUPPORT_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/tensor.h"
#include "core/utils/random_tensor.h"

namespace kernelserve {

// Outcome of AllClose.
struct AllCloseResult {
  bool ok = true;            // every element within tolerance
  std::string message;       // empty when ok; otherwise names the worst index and its values
  int64_t worst_index = -1;  // flat index with the largest excess over tolerance; -1 if ok
  int64_t num_bad = 0;       // elements outside tolerance
  double max_abs_error = 0;  // largest |actual - expected| over finite pairs
};

// Checks |actual - expected| <= atol + rtol * |expected| element-wise (as numpy.isclose).
// Infinities must match exactly; a NaN on either side fails. Sizes (or, for tensors, shapes)
// must match, otherwise ok = false with a message naming both.
AllCloseResult AllClose(absl::Span<const double> actual, absl::Span<const double> expected,
                        double rtol, double atol);
AllCloseResult AllClose(const std::vector<float>& actual, const std::vector<float>& expected,
                        double rtol, double atol);
// Tensors of any dtypes, compared as doubles.
AllCloseResult AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol);

// ||a - b||_2 / ||b||_2 in double. 0 when both are all zero; +inf when only b is; +inf when
// the sizes differ.
double RelativeError(absl::Span<const double> a, absl::Span<const double> b);
double RelativeError(const Tensor& a, const Tensor& b);

// Why an attention lse `got` does not match the reference `want`, or "" when it does: the
// same spec, -inf exactly where `want` has it, no NaN or inf elsewhere, and a relative error
// under 1e-3 over the finite elements.
std::string LseMismatch(const Tensor& got, const Tensor& want);

// Shapes of RandomAttentionInputs.
struct AttentionInputsOptions {
  int64_t B = 2;              // batch
  int64_t Sq = 16;            // query length
  int64_t Sk = 16;            // key/value length
  int64_t Hq = 4;             // query heads
  int64_t Hkv = 4;            // key/value heads (Hq must be a multiple for GQA kernels)
  int64_t D = 32;             // head dimension
  DType dtype = DType::kF32;  // element type of q, k and v
  uint64_t seed = 0;          // q, k, v use seed, seed + 1, seed + 2
};

// {"q": [B,Sq,Hq,D], "k": [B,Sk,Hkv,D], "v": [B,Sk,Hkv,D]}, values uniform in [-1, 1).
TensorMap RandomAttentionInputs(const AttentionInputsOptions& options);

}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_SUPPORT_TESTING_H_
