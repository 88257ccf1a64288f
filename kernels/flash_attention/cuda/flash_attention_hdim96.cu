// The compiled flash attention launcher instances of head dim 96 (mma.sync and wgmma).
#include "kernels/flash_attention/cuda/flash_attention_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_instances.h"
#include "kernels/flash_attention/cuda/flash_attention_wgmma.cuh"
#include "kernels/flash_attention/cuda/flash_attention_ws.cuh"

namespace kernelserve::cuda {

KS_FLASH_INSTANCES_D96(KS_INSTANTIATE_FLASH)

}  // namespace kernelserve::cuda
