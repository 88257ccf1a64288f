#include "kernels/flash_attention/flash_attention_bwd.h"

#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/flash_attention/cuda/flash_attention_bwd_cuda.h"
#endif
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/runtime/cudnn/cudnn_library.h"
#endif

namespace kernelserve {

std::unique_ptr<Kernel> MakeFlashAttentionBwd() {
  auto kernel = std::make_unique<FlashAttentionBwdKernel>();
  kernel->AddImpl(MakeFlashAttentionBwdCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakeFlashAttentionBwdCuda());
#endif
#ifdef KERNELSERVE_WITH_CUDNN
  // Where cuDNN loads.
  if (cudnn::LoadCudnn().ok()) {
    kernel->AddImpl(MakeFlashAttentionBwdCudnn());
    kernel->SetGpuAutoImpl(MakeFlashAttentionBwdGpuAuto());
  }
#endif
  return kernel;
}

}  // namespace kernelserve
