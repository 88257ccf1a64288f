// The CPU implementation of the flash attention kernel.
#ifndef KERNELSERVE_KERNELS_CPU_FLASH_ATTENTION_IMPL_H_
#define KERNELSERVE_KERNELS_CPU_FLASH_ATTENTION_IMPL_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve::cpu {

// Runs flash attention with FlashAttentionCpu.
// Thread safety: stateless; Prepare may run on many threads at once.
class FlashAttentionCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }
  // Keeps pointers to q, k, v and bias in `inputs` (which must outlive the run), copies the
  // offsets and segment ids as int64 and allocates `out` (and `lse` when return_lse).
  // InvalidArgument when the inputs fail Validate.
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                       const Attributes& attrs,
                                                       const DeviceInfo& device) override;
  // CheckFlashAttentionCpuConfig (kernels/cpu/checks.h).
  absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap& inputs,
                           const DeviceInfo& device) const override;
};

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_CPU_FLASH_ATTENTION_IMPL_H_
