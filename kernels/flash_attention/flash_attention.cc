#include "kernels/flash_attention/flash_attention.h"

#include "kernels/flash_attention/cpu/flash_attention_cpu.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"
#endif

namespace kernelserve {

std::unique_ptr<Kernel> MakeFlashAttention() {
  auto kernel = std::make_unique<FlashAttentionKernel>();
  kernel->AddImpl(MakeFlashAttentionCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakeFlashAttentionCuda());
#endif
  return kernel;
}

}  // namespace kernelserve
