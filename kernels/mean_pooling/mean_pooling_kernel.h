// The mean pooling kernel: its schema, the analysis of a call into a MeanPoolingProblem, and the
// checks and output specs of the contract. Its platforms (cpu/, cuda/) read the problem;
// mean_pooling.h assembles the kernel with them.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_KERNEL_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_KERNEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"
#include "kernels/mean_pooling/mean_pooling_form.h"

namespace kernelserve {

// A mean pooling call as the platforms see it. A value type.
struct MeanPoolingProblem : Problem {
  PoolingForm form = PoolingForm::kDense;
  DType dtype = DType::kF32;  // of x and out
  Shape x_shape;              // x's: [B,S,H], [T,H] or [1,T,H]
  int64_t num_sequences = 0;  // B (dense, masked) or N (varlen)
  int64_t seq_len = 0;        // S (dense, masked); 0 in varlen
  int64_t total_rows = 0;     // B*S (dense, masked) or T (varlen)
  int64_t hidden = 0;         // H
  int64_t chunk_size = 32;    // the chunk_size param (forward only)
};

// "mean_pooling" v1: the mean over the rows of each sequence.
//   x [B,S,H]                            -> out [B,H]
//   x [B,S,H], mask [B,S]                -> out [B,H], mean over the rows whose mask is nonzero
//   x [T,H] or [1,T,H], cu_seqlens [N+1] -> out [N,H], sequence n = rows cu[n]..cu[n+1]
// A sequence with no counted row gives zeros. Sums in float; out has x's dtype.
// Param chunk_size (int >= 1, default 32): rows per work item; it never changes the result.
const KernelSchema& MeanPoolingSchema();

// The rules of x, mask and cu_seqlens alone (the problem's chunk_size left at its default),
// shared with mean_pooling_bwd. REQUIRES: the inputs passed a schema's checks with x present.
absl::StatusOr<MeanPoolingProblem> AnalyzeMeanPoolingShapes(const TensorSpecMap& inputs);

// A call's index inputs as every platform reads them, each empty when not given: cu_seqlens as
// int64 and mask as bytes, 1 where the row counts (nonzero) and 0 elsewhere, whatever the
// mask's dtype. A value type.
struct MeanPoolingIndex {
  explicit MeanPoolingIndex(const TensorMap& inputs);

  std::vector<int64_t> cu_seqlens;
  std::vector<uint8_t> mask;
};

// Thread safety: the const methods are thread-safe (see Kernel). mean_pooling_bwd derives
// from it for its data checks and synthesized inputs.
class MeanPoolingKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return MeanPoolingSchema(); }
  // Checks that cu_seqlens starts at 0, never decreases and ends at most at T.
  absl::Status ValidateData(const Problem& problem, const TensorMap& inputs) const override;
  TensorSpecMap OutputSpecs(const Problem& problem) const override;
  // The default's random data, with cu_seqlens splitting x into sequences of near equal
  // lengths.
  absl::StatusOr<TensorMap> SynthesizeInputs(const Problem& problem, const TensorSpecMap& specs,
                                             uint64_t seed) const override;

 protected:
  // The contract's rules beyond the schema (mask or cu_seqlens, not both; shapes that agree).
  // InvalidArgument naming the input.
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_KERNEL_H_
