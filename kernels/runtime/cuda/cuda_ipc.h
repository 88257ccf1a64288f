// GPU memory the server reaches outside a kernel call: a GPU buffer another process exported
// with cudaIpcGetMemHandle, mapped here (a client's CUDA shared-memory region), and memory of the
// server's own that outlives calls (resident tensors).
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IPC_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IPC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

namespace kernelserve::cuda {

// Opens the cudaIpcMemHandle_t in `raw_handle` (its 64 bytes) on GPU `device` and checks that
// the exported allocation holds `byte_size` bytes. The address is unmapped
// (cudaIpcCloseMemHandle) when the last copy of the returned pointer goes; work using it must
// be finished by then. InvalidArgument for a handle of the wrong size, one that does not open
// (naming the CUDA error), a GPU that does not exist or an allocation too small. Thread-safe.
absl::StatusOr<std::shared_ptr<void>> OpenIpcBuffer(std::string_view raw_handle, int device,
                                                    uint64_t byte_size);

// Page-locks the `bytes` host bytes at `host` (a client's system shared-memory region) for
// every GPU (cudaHostRegister), so that copies to and from them are one DMA. Unlocked when the
// last copy of the returned handle goes. The error of cudaHostRegister when it fails.
absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* host, size_t bytes);

// Copies `bytes` bytes of GPU memory at `gpu` to host memory at `host`, synchronously.
absl::Status CopyGpuToHost(void* host, const void* gpu, size_t bytes);
// Copies `bytes` bytes of host memory (or another GPU's) at `host` to GPU memory at `gpu`,
// synchronously (one DMA from page-locked memory).
absl::Status CopyHostToGpu(void* gpu, const void* host, size_t bytes);

// `bytes` bytes of GPU `device`'s memory from its default memory pool (the pool calls allocate
// from), zeroed; given back to the pool when the last copy of the pointer goes (work using it
// must be finished by then). ResourceExhausted when the GPU is out of memory (after giving the
// pool's cached memory back); InvalidArgument for a GPU that does not exist. Thread-safe.
absl::StatusOr<std::shared_ptr<void>> AllocateGpuMemory(int device, uint64_t bytes);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IPC_H_
