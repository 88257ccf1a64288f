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
  attention->AddImpl(MakeCudaFlashAttention());
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

absl::StatusOr<std::pair<int64_t, int64_t>> GpuMemoryInfo(int ordinal) {
#ifdef KERNELSERVE_WITH_CUDA
  return CudaMemoryInfo(ordinal);
#else
  (void)ordinal;
  return absl::UnavailableError("this build has no CUDA kernels");
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
