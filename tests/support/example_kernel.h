// The example kernel of docs/ADDING_A_KERNEL.md, made step by step as that guide says: "rms_norm"
// v1, its schema, the analysis of a call into an RmsNormProblem and the kernel with its
// platforms (example_kernel_cpu.h). Served by kernelserve-toy-server next to the toy kernel,
// and by no other binary.
#ifndef KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_H_
#define KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"

namespace kernelserve::testing {

// An rms_norm call as the platforms see it. A value type.
struct RmsNormProblem : Problem {
  DType dtype = DType::kF32;  // of x, weight and out
  Shape shape;                // x's (and out's): [..., H]
  int64_t rows = 0;           // the product of x's dims but the last
  int64_t hidden = 0;         // H, x's last dim
  bool has_weight = false;    // weight [H] given
  double eps = 1e-6;          // the eps param
};

// "rms_norm" v1: each row of x (its last axis) divided by its root mean square.
//   x [..., H] (rank 1 to 4; f32, f16 or bf16)          -> out, x's shape and dtype
//   out[r, h] = x[r, h] / sqrt(mean_h(x[r, h]^2) + eps) * weight[h]
// weight [H] (optional, x's dtype) defaults to ones. Sums in float; out rounded once.
// Param eps (float in 1e-12..1, default 1e-6): added to the mean square.
const KernelSchema& RmsNormSchema();

// Thread safety: the const methods are thread-safe (see Kernel).
class RmsNormKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return RmsNormSchema(); }
  TensorSpecMap OutputSpecs(const Problem& problem) const override;

 protected:
  // The rules beyond the schema: weight is [H] of x's dtype. InvalidArgument naming the input.
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

// RmsNormKernel with its cpu platform (MakeRmsNormCpu), the way kernels/<kernel>/<kernel>.cc
// assembles a built-in kernel with the platforms of the build.
std::unique_ptr<Kernel> MakeExampleKernel();

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_H_
