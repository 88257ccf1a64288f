#include "kernels/runtime/cuda/cuda_ipc.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/driver_function.h"

namespace kernelserve::cuda {
namespace {

// The size of the allocation that `address` starts, through the driver's cuMemGetAddressRange
// (found at run time: the server links the runtime only). nullopt when it cannot be asked.
absl::StatusOr<size_t> AllocationBytes(void* address) {
  static const auto get_range = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(
      FindDriverFunction("cuMemGetAddressRange", 12000));
  if (get_range == nullptr) {
    return absl::UnimplementedError("the CUDA driver lacks cuMemGetAddressRange");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult result = get_range(&base, &size, reinterpret_cast<CUdeviceptr>(address));
  if (result != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuMemGetAddressRange failed (CUresult ", static_cast<int>(result), ")"));
  }
  return size - (reinterpret_cast<CUdeviceptr>(address) - base);
}

// Makes GPU `device` the thread's current one; InvalidArgument for a GPU this process lacks.
absl::Status UseGpu(int device) {
  int count = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device, ": this server has GPUs 0..", count - 1));
  }
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<void>> OpenIpcBuffer(std::string_view raw_handle, int device,
                                                    uint64_t byte_size) {
  cudaIpcMemHandle_t handle{};
  if (raw_handle.size() != sizeof(handle)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_handle: ", raw_handle.size(), " bytes; a cudaIpcMemHandle_t has ", sizeof(handle)));
  }
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  KS_RETURN_IF_ERROR(UseGpu(device));
  void* address = nullptr;
  if (cudaError_t error = cudaIpcOpenMemHandle(&address, handle, cudaIpcMemLazyEnablePeerAccess);
      error != cudaSuccess) {
    const absl::Status status = CudaStatus(error, "cudaIpcOpenMemHandle");
    return absl::InvalidArgumentError(
        absl::StrCat("raw_handle does not open on GPU ", device, " (", status.message(),
                     "); export it with cudaIpcGetMemHandle from a live process on this host"));
  }
  std::shared_ptr<void> buffer(address, [device](void* p) {
    // Errors cannot be reported from a deleter.
    if (cudaSetDevice(device) != cudaSuccess || cudaIpcCloseMemHandle(p) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  });
  absl::StatusOr<size_t> bytes = AllocationBytes(address);
  if (!bytes.ok()) return bytes.status();
  if (*bytes < byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_size ", byte_size, " is past the exported allocation's ", *bytes, " bytes"));
  }
  return buffer;
}

absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* host, size_t bytes) {
  KS_CUDA_RETURN_IF_ERROR(cudaHostRegister(host, bytes, cudaHostRegisterPortable));
  return std::shared_ptr<void>(host, [](void* p) {
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
  });
}

absl::Status CopyGpuToHost(void* host, const void* gpu, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  KS_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, gpu, bytes, cudaMemcpyDefault));
  return absl::OkStatus();
}

absl::Status CopyHostToGpu(void* gpu, const void* host, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  KS_CUDA_RETURN_IF_ERROR(cudaMemcpy(gpu, host, bytes, cudaMemcpyDefault));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<void>> AllocateGpuMemory(int device, uint64_t bytes) {
  KS_RETURN_IF_ERROR(UseGpu(device));
  // On the legacy default stream, which the workers' non-blocking streams do not wait for; the
  // memory is usable by any stream once this stream is synchronized below.
  void* address = nullptr;
  cudaError_t error = cudaMallocAsync(&address, bytes, nullptr);
  if (error == cudaErrorMemoryAllocation) {
    // The pool may cache freed blocks that do not fit: give them back and try once more.
    (void)cudaGetLastError();
    cudaMemPool_t pool;
    KS_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
    KS_CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
    error = cudaMallocAsync(&address, bytes, nullptr);
  }
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("GPU ", device, " is out of memory for ", bytes, " more bytes"));
  }
  KS_CUDA_RETURN_IF_ERROR(error);
  std::shared_ptr<void> memory(address, [device](void* p) {
    // Errors cannot be reported from a deleter.
    if (cudaSetDevice(device) != cudaSuccess || cudaFreeAsync(p, nullptr) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  });
  KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(address, 0, bytes, nullptr));
  KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return memory;
}

}  // namespace kernelserve::cuda
