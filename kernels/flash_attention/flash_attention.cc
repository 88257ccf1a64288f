#include "kernels/flash_attention/flash_attention.h"

#include "kernels/flash_attention/cpu/flash_attention_cpu.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"
#endif
#ifdef KERNELSERVE_WITH_CUDNN
#include <cstdio>

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
  // The cudnn platform exists where cuDNN loads; where it does not, one line (once) says why.
  static const bool loaded = [] {
    absl::StatusOr<int64_t> version = cudnn::LoadCudnn();
    if (!version.ok()) {
      std::fprintf(stderr, "kernelserve: no cudnn platform: %s\n",
                   std::string(version.status().message()).c_str());
    }
    return version.ok();
  }();
  if (loaded) {
    kernel->AddImpl(MakeFlashAttentionCudnn());
    kernel->SetGpuAutoImpl(MakeFlashAttentionGpuAuto());
  }
#endif
  return kernel;
}

}  // namespace kernelserve
