// The uploads every GPU run of flash attention starts from (the forward's and the backward's):
// q, k, v, the index inputs and the bias of a call on one device, described for the kernels
// as FlashDeviceArgs.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_RUN_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_RUN_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/tensor.h"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"

namespace kernelserve::cuda {

// Grid limits of the flash attention launches (gridDim.y = heads, gridDim.z = sequences).
inline constexpr int64_t kMaxFlashGridYZ = 65535;

// A CudaRun holding a flash attention call's forward inputs on its device. Derived runs call
// UploadFlashInputs from their Init, add their own buffers and outputs to args_ and launch.
// Thread safety: one thread at a time (PreparedRun).
class FlashInputsRun : public CudaRun {
 protected:
  // REQUIRES: as CudaRun's; `device` is a CUDA device.
  FlashInputsRun(const FlashAttentionProblem& problem, const DeviceInfo& device,
                 DeviceThreadResources* resources)
      : CudaRun(device.ordinal, resources), p_(problem), device_(device) {}

  // Creates the events, uploads q, k, v, cu_seqlens, segment ids and bias from `inputs` (as
  // the problem has them) and fills args_ but its outputs (out, lse).
  absl::Status UploadFlashInputs(const TensorMap& inputs);

  const FlashAttentionProblem p_;
  const DeviceInfo device_;
  FlashDeviceArgs args_;
  int64_t covered_q_ = 0;      // q rows inside sequences (varlen: the rest are no sequence's)
  int64_t max_seq_len_k_ = 0;  // varlen: the longest key sequence (args_ has the query's)

 private:
  absl::Status UploadIndexInputs(const TensorMap& inputs);

  DeviceBuffer q_, k_, v_, bias_, cu_q_, cu_k_, seg_q_, seg_k_;
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_RUN_H_
