// The compiled flash attention launcher instances of head dim 32 (mma.sync).
#include "kernels/cuda/flash_attention_device.cuh"
#include "kernels/cuda/flash_attention_instances.h"

namespace kernelserve::cuda {

#define KS_INSTANTIATE_FLASH(ALGO, DT, CT, D, BQ, BK, WARPS, STAGES)             \
  template cudaError_t LaunchFlashAttention##ALGO<CT, D, BQ, BK, WARPS, STAGES>( \
      const FlashDeviceArgs& args, cudaStream_t stream);
KS_FLASH_INSTANCES_D32(KS_INSTANTIATE_FLASH)
#undef KS_INSTANTIATE_FLASH

}  // namespace kernelserve::cuda
