// The compiled flash attention backward launcher instances of head dim 128: mma.sync, and
// wgmma where the build targets Hopper.
#include "kernels/flash_attention/cuda/flash_attention_bwd_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_instances.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_wgmma_launch.cuh"

namespace kernelserve::cuda {

KS_FLASH_BWD_INSTANCES_D128(KS_INSTANTIATE_FLASH_BWD)

}  // namespace kernelserve::cuda
