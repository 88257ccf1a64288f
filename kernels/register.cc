#include "kernels/register.h"

#include "core/status_macros.h"
#include "kernels/flash_attention_kernel.h"
#include "kernels/mean_pooling_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/cuda/cuda_platform.h"
#endif

namespace kernelserve {

absl::Status RegisterBuiltinKernels(KernelRegistry* registry) {
  std::unique_ptr<Kernel> pooling = MakeMeanPoolingKernel();
  std::unique_ptr<Kernel> attention = MakeFlashAttentionKernel();
#ifdef KERNELSERVE_WITH_CUDA
  pooling->AddImpl(MakeCudaMeanPooling());
#endif
  KS_RETURN_IF_ERROR(registry->Register(std::move(pooling)));
  KS_RETURN_IF_ERROR(registry->Register(std::move(attention)));
  return absl::OkStatus();
}

std::vector<DeviceInfo> DetectGpus() {
#ifdef KERNELSERVE_WITH_CUDA
  return EnumerateCudaDevices();
#else
  return {};
#endif
}

bool BuiltWithCuda() {
#ifdef KERNELSERVE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace kernelserve
