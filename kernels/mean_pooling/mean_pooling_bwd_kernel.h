// The mean pooling backward kernel (mean_pooling's VJP): its schema, the analysis of a call
// into a MeanPoolingProblem (the forward's, whose x is only a shape here) and the checks and
// output specs of the contract. Its platforms are in cpu/ and cuda/; mean_pooling.h assembles
// the kernel with them.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_BWD_KERNEL_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_BWD_KERNEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"

namespace kernelserve {

// "mean_pooling_bwd" v1: the gradient of mean_pooling's x given the gradient of its out.
//   dout [B,H], x [B,S,H] (shape only)                   -> dx [B,S,H]
//   dout [B,H], x [B,S,H] (shape only), mask [B,S]       -> dx [B,S,H]
//   dout [N,H], x [T,H] or [1,T,H] (shape only), cu_seqlens [N+1] -> dx shaped as x
// dx[row] = dout[n] / count_n for each counted row of sequence n (count_n its counted rows);
// zeros for rows no sequence counts (mask 0, past cu[N]). dout has x's dtype; dx too, each
// element the quotient rounded once. x's data is never read and may be left out.
const KernelSchema& MeanPoolingBwdSchema();

// Thread safety: the const methods are thread-safe (see Kernel). The forward's ValidateData
// (cu_seqlens) and SynthesizeInputs (even cu_seqlens; x shape-only) serve it unchanged.
class MeanPoolingBwdKernel : public MeanPoolingKernel {
 public:
  const KernelSchema& schema() const override { return MeanPoolingBwdSchema(); }
  TensorSpecMap OutputSpecs(const Problem& problem) const override;

 protected:
  // The forward's rules (AnalyzeMeanPoolingShapes), then dout against the problem.
  // InvalidArgument naming the input.
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_BWD_KERNEL_H_
