// Device-side resources of the CUDA platform: per-(thread, device) streams and pinned staging
// buffers, and device buffers from each device's caching memory pool.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RESOURCES_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RESOURCES_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/host_pool.h"
#include "kernels/runtime/cuda/launch_gate.h"

namespace kernelserve::cuda {

// What one thread uses on one device: a non-blocking stream (the worker's stream: copies and
// kernels of the thread's calls go there) with its launch gate, and a pinned host buffer that
// stages copies between pageable host memory and the device, reused across calls and grown as
// needed up to a cap.
// Made on a thread's first call for the device; destroyed when the thread exits.
// Thread safety: used only by its own thread (the stream itself may be used from any thread).
class DeviceThreadResources {
 public:
  DeviceThreadResources(const DeviceThreadResources&) = delete;
  DeviceThreadResources& operator=(const DeviceThreadResources&) = delete;
  ~DeviceThreadResources();

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  // The gate of the stream (CudaRun::TimedLaunch holds the stream there while it queues).
  LaunchGate& gate() { return gate_; }

  // Queues the copy of `bytes` from `host` to `device` on `stream`, without waiting for it: one
  // DMA from page-locked memory, which reads `host` after this returns; from pageable memory
  // through the staging buffer, in pieces (filling one half of the buffer, with the shared host
  // copier's threads, while the other half is in DMA), `host` read before this returns.
  // REQUIRES: `device` holds `bytes` bytes on this device; page-locked `host` memory stays as
  // it is until the stream has passed the copy (the caller synchronizes the stream).
  absl::Status Upload(const void* host, size_t bytes, void* device, cudaStream_t stream);
  // Copies `bytes` from `device` to `host` after the work queued on `stream`, the same way in
  // reverse (one DMA into page-locked memory; else one half in DMA while the other is copied
  // out); waits.
  absl::Status Download(const void* device, size_t bytes, void* host, cudaStream_t stream);

 private:
  friend absl::StatusOr<DeviceThreadResources*> ThisThreadResources(int ordinal);
  explicit DeviceThreadResources(int ordinal) : ordinal_(ordinal) {}
  absl::Status Init();
  // Makes the staging buffer at least min(bytes, cap) bytes.
  absl::Status ReserveStaging(size_t bytes);

  const int ordinal_;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;  // pinned (cudaMallocHost)
  size_t staging_bytes_ = 0;
  cudaEvent_t half_free_[2] = {nullptr, nullptr};  // each half's last copy out of it
  LaunchGate gate_;
};

// Default of SetPinnedHostLimit.
inline constexpr size_t kDefaultPinnedHostBytes = size_t{4} << 30;

// Sets the most bytes of page-locked host memory PinnedHostPool may hold. Takes effect only
// before the pool's first use (the server calls it once at startup); 0 = none.
void SetPinnedHostLimit(size_t bytes);

// The process's pool of page-locked host memory (cudaHostAlloc, portable to every device) for
// request bytes and outputs: a tensor there goes to or from a GPU in one DMA. Made on first
// use; never destroyed. Thread-safe.
HostBufferPool* PinnedHostPool();

// The calling thread's resources for device `ordinal`, made on first use (which also sets the
// device's memory pool to keep freed memory for reuse). Makes `ordinal` the thread's current
// device. The pointer stays valid until the thread exits.
absl::StatusOr<DeviceThreadResources*> ThisThreadResources(int ordinal);

// Device memory from the device's memory pool (cudaMallocAsync), freed in stream order on the
// stream it was allocated on. Freed memory stays in the pool for the next allocation.
// Move-only. Thread safety: as a plain value.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  // `bytes` bytes on device `ordinal`, usable by work queued on `stream` after this call (and
  // by other streams once `stream` has been synchronized). bytes == 0 gives an empty buffer.
  // Out of device memory (after giving the pool's cached memory back, and for up to 16 MiB
  // after waiting up to 1 s for other calls to give theirs) -> ResourceExhausted.
  static absl::StatusOr<DeviceBuffer> Allocate(int ordinal, size_t bytes, cudaStream_t stream);
  // The `bytes` bytes at `data`, device memory that someone else owns (a client's CUDA
  // shared-memory region): never freed by the buffer.
  static DeviceBuffer View(void* data, size_t bytes);

  void* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void Release();

  int ordinal_ = -1;
  void* ptr_ = nullptr;
  size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owned_ = true;  // false for a View
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RESOURCES_H_
