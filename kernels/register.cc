#include "kernels/register.h"

#include "core/status_macros.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/paged_attention/paged_attention.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#endif
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/runtime/cudnn/cudnn_library.h"
#endif

namespace kernelserve {

absl::Status RegisterBuiltinKernels(KernelRegistry* registry) {
  // One line per kernel: its folder's Make function adds every platform this build has.
  KS_RETURN_IF_ERROR(registry->Register(MakeMeanPooling()));
  KS_RETURN_IF_ERROR(registry->Register(MakeMeanPoolingBwd()));
  KS_RETURN_IF_ERROR(registry->Register(MakeFlashAttention()));
  KS_RETURN_IF_ERROR(registry->Register(MakeFlashAttentionBwd()));
  KS_RETURN_IF_ERROR(registry->Register(MakePagedAttention()));
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

HostBufferPool* ConfigureGpuHostMemory(size_t limit_bytes) {
#ifdef KERNELSERVE_WITH_CUDA
  cuda::SetPinnedHostLimit(limit_bytes);
  return limit_bytes > 0 ? cuda::PinnedHostPool() : nullptr;
#else
  (void)limit_bytes;
  return nullptr;
#endif
}

void SetGpuLaunchGate(int64_t min_bytes) {
#ifdef KERNELSERVE_WITH_CUDA
  cuda::SetLaunchGateMinBytes(min_bytes);
#else
  (void)min_bytes;
#endif
}

std::string LoadedCudnnVersion() {
#ifdef KERNELSERVE_WITH_CUDNN
  absl::StatusOr<int64_t> version = cudnn::LoadCudnn();
  if (version.ok()) return cudnn::CudnnVersionName(*version);
#endif
  return "none";
}

std::string CudnnUnavailableReason() {
#ifdef KERNELSERVE_WITH_CUDNN
  absl::StatusOr<int64_t> version = cudnn::LoadCudnn();
  if (!version.ok()) return std::string(version.status().message());
#endif
  return "";
}

bool BuiltWithCuda() {
#ifdef KERNELSERVE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace kernelserve
