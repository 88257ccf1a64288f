// The CPU implementation of the mean pooling kernel.
#ifndef KERNELSERVE_KERNELS_CPU_MEAN_POOLING_IMPL_H_
#define KERNELSERVE_KERNELS_CPU_MEAN_POOLING_IMPL_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve::cpu {

// Runs mean pooling with MeanPoolingCpu. A config's block_size of 0 takes the chunk_size
// attribute. Thread safety: stateless; Prepare may run on many threads at once.
class MeanPoolingCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }
  // Keeps a pointer to inputs["x"] (which must outlive the run), copies the mask / offsets as
  // int64 / bytes and allocates `out`. InvalidArgument when the inputs fail Validate.
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                       const Attributes& attrs,
                                                       const DeviceInfo& device) override;
  // CheckMeanPoolingCpuConfig (kernels/cpu/checks.h).
  absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap& inputs,
                           const DeviceInfo& device) const override;
};

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_CPU_MEAN_POOLING_IMPL_H_
