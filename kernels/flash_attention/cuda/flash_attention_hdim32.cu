// The compiled flash attention launcher instances of head dim 32 (mma.sync).
#include "kernels/flash_attention/cuda/flash_attention_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_instances.h"

namespace kernelserve::cuda {

KS_FLASH_INSTANCES_D32(KS_INSTANTIATE_FLASH)

}  // namespace kernelserve::cuda
