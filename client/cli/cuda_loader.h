// The few CUDA runtime calls the CLI needs for `bench --shared-memory=cuda`, loaded at run time
// (dlopen of libcudart), so that the tool neither links nor needs CUDA otherwise.
#ifndef KERNELSERVE_CLIENT_CLI_CUDA_LOADER_H_
#define KERNELSERVE_CLIENT_CLI_CUDA_LOADER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kernelserve::cli {

// `bytes` bytes of GPU memory (cudaMalloc), freed when destroyed.
// Thread safety: not thread-safe.
class GpuBuffer {
 public:
  // Allocates on GPU `device`. Unavailable when no CUDA runtime can be loaded (naming the
  // libraries tried) or the GPU cannot be used; Internal with the runtime's message when a
  // call fails.
  static absl::StatusOr<std::unique_ptr<GpuBuffer>> Allocate(int device, size_t bytes);
  ~GpuBuffer();
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  void* data() const { return data_; }
  // Copies `bytes` host bytes at `host` to `offset`.
  absl::Status CopyIn(size_t offset, const void* host, size_t bytes) const;
  // The cudaIpcMemHandle_t of the buffer (64 bytes).
  absl::StatusOr<std::string> IpcHandle() const;

 private:
  struct Runtime;
  GpuBuffer(const Runtime* runtime, int device, void* data)
      : runtime_(runtime), device_(device), data_(data) {}

  const Runtime* runtime_;
  const int device_;
  void* const data_;
};

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_CUDA_LOADER_H_
