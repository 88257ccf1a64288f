// The mean pooling kernel: validation, output specs, configs and the factory that returns it
// with its CPU implementation.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_KERNEL_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_KERNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve {

// A mean pooling call as the implementations see it, read from validated inputs.
// A value type.
struct MeanPoolingProblem {
  enum class Form { kDense, kMasked, kVarlen };
  Form form = Form::kDense;
  DType dtype = DType::kF32;  // of x and out
  int64_t num_sequences = 0;  // B (dense, masked) or N (varlen)
  int64_t seq_len = 0;        // S (dense, masked); 0 in varlen
  int64_t total_rows = 0;     // B*S (dense, masked) or T (varlen)
  int64_t hidden = 0;         // H
  int64_t chunk_size = 32;    // the chunk_size attribute
};

// Checks the inputs and attributes of a mean pooling call (see MeanPoolingKernel) and
// describes it. InvalidArgument naming the input or attribute and what was expected.
absl::StatusOr<MeanPoolingProblem> AnalyzeMeanPooling(const TensorSpecMap& inputs,
                                                      const Attributes& attrs);

// "mean_pooling" v1: the mean over the rows of each sequence.
//   x [B,S,H]                      -> out [B,H]
//   x [B,S,H], mask [B,S]           -> out [B,H], mean over the rows whose mask is nonzero
//   x [T,H] or [1,T,H], cu_seqlens [N+1] -> out [N,H], sequence n = rows cu[n]..cu[n+1]
// A sequence with no counted row gives zeros. Sums in float; out has x's dtype.
// Attribute chunk_size (int > 0, default 32): rows per work item; it never changes the result.
// Thread safety: the const methods are thread-safe (see Kernel).
class MeanPoolingKernel : public Kernel {
 public:
  std::string name() const override { return "mean_pooling"; }
  int version() const override { return 1; }

  std::vector<ArgDoc> input_docs() const override;
  std::vector<ArgDoc> output_docs() const override;
  std::vector<ArgDoc> attribute_docs() const override;

  absl::Status Validate(const TensorSpecMap& inputs, const Attributes& attrs) const override;
  // Checks that cu_seqlens starts at 0, never decreases and ends at most at T.
  absl::Status ValidateData(const TensorMap& inputs, const Attributes& attrs) const override;
  TensorSpecMap OutputSpecs(const TensorSpecMap& inputs, const Attributes& attrs) const override;

  // CPU: block_size = chunk_size, one thread below 2^18 elements of x, else every hardware
  // thread. CUDA: cuda::MeanPoolingHeuristic. Other platforms: an empty config.
  KernelConfig HeuristicConfig(const TensorSpecMap& inputs, const Attributes& attrs,
                               const DeviceInfo& device) const override;
  // CPU: block_size in {chunk_size, 32, 128, 512} x num_warps in {1, 2, hardware threads}.
  // CUDA: cuda::MeanPoolingCandidates. Other platforms: none.
  std::vector<KernelConfig> CandidateConfigs(const TensorSpecMap& inputs, const Attributes& attrs,
                                             const DeviceInfo& device) const override;
};

// A MeanPoolingKernel with its CPU implementation added.
std::unique_ptr<Kernel> MakeMeanPoolingKernel();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_KERNEL_H_
