// RuntimeGpuMemoryAccess: CUDA regions and resident tensors' GPU memory through the CUDA
// runtime (kernels/runtime/cuda), in builds with CUDA.
#include <memory>

#include "server/shared_memory.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/runtime/cuda/cuda_ipc.h"
#endif

namespace kernelserve::server {

#ifdef KERNELSERVE_WITH_CUDA
namespace {

class CudaRuntimeAccess final : public GpuMemoryAccess {
 public:
  absl::StatusOr<std::shared_ptr<void>> Open(std::string_view raw_handle, int device,
                                             uint64_t byte_size) override {
    return cuda::OpenIpcBuffer(raw_handle, device, byte_size);
  }
  absl::Status CopyToHost(void* host, const void* gpu, size_t bytes) override {
    return cuda::CopyGpuToHost(host, gpu, bytes);
  }
  absl::StatusOr<std::shared_ptr<void>> Pin(void* host, size_t bytes) override {
    return cuda::PinHostMemory(host, bytes);
  }
  absl::StatusOr<std::shared_ptr<void>> Allocate(int device, uint64_t bytes) override {
    return cuda::AllocateGpuMemory(device, bytes);
  }
  absl::Status CopyFromHost(void* gpu, const void* host, size_t bytes) override {
    return cuda::CopyHostToGpu(gpu, host, bytes);
  }
};

}  // namespace

std::unique_ptr<GpuMemoryAccess> RuntimeGpuMemoryAccess() {
  return std::make_unique<CudaRuntimeAccess>();
}
#else
std::unique_ptr<GpuMemoryAccess> RuntimeGpuMemoryAccess() { return nullptr; }
#endif

}  // namespace kernelserve::server
