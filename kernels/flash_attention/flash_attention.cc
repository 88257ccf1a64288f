#include "kernels/flash_attention/flash_attention.h"

#include "kernels/flash_attention/cpu/flash_attention_cpu.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"
#endif
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/runtime/cudnn/cudnn_library.h"
#endif

namespace kernelserve {

std::unique_ptr<Kernel> MakeFlashAttention() {
  auto kernel = std::make_unique<FlashAttentionKernel>();
  kernel->AddImpl(MakeFlashAttentionCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakeFlashAttentionCuda());
#endif
#ifdef KERNELSERVE_WITH_CUDNN
  // The cudnn platform exists where cuDNN loads (the server logs why where it does not:
  // CudnnUnavailableReason in kernels/register.h).
  if (cudnn::LoadCudnn().ok()) {
    kernel->AddImpl(MakeFlashAttentionCudnn());
    kernel->SetGpuAutoImpl(MakeFlashAttentionGpuAuto());
  }
#endif
  return kernel;
}

}  // namespace kernelserve
