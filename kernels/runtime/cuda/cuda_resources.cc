#include "kernels/runtime/cuda/cuda_resources.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/runtime/cpu/host_copy.h"
#include "kernels/runtime/cuda/cuda_check.h"

namespace kernelserve::cuda {
namespace {

// Largest pinned staging buffer per (thread, device); copies larger than this go in pieces.
constexpr size_t kStagingCapBytes = size_t{32} << 20;

// Devices whose default memory pool has been set to keep freed memory.
class PoolSetup {
 public:
  absl::Status Ensure(int ordinal) {
    absl::MutexLock lock(&mu_);
    if (done_.contains(ordinal)) return absl::OkStatus();
    int supported = 0;
    KS_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, ordinal));
    if (supported == 0) {
      return absl::FailedPreconditionError(
          "CUDA device has no stream-ordered memory pools (cudaMallocAsync); need CUDA 11.2+");
    }
    cudaMemPool_t pool;
    KS_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    uint64_t keep_all = UINT64_MAX;  // never give freed memory back on synchronization
    KS_CUDA_RETURN_IF_ERROR(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
    done_.insert(ordinal);
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::set<int> done_ ABSL_GUARDED_BY(mu_);
};

PoolSetup& Pools() {
  static PoolSetup* const pools = new PoolSetup();  // lives as long as the process
  return *pools;
}

// Page-locked host memory (pinned, or registered with cudaHostRegister): a device copies to or
// from it by DMA. Any query error reads as pageable.
bool IsPageLocked(const void* host) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    (void)cudaGetLastError();  // clears the (non-sticky) error
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

std::atomic<size_t>& PinnedLimit() {
  static std::atomic<size_t> limit{kDefaultPinnedHostBytes};
  return limit;
}

}  // namespace

void SetPinnedHostLimit(size_t bytes) { PinnedLimit().store(bytes); }

HostBufferPool* PinnedHostPool() {
  // Never destroyed: buffers are released by gRPC threads until the process exits.
  static HostBufferPool* const pool = [] {
    HostPoolOptions options;
    options.limit_bytes = PinnedLimit().load();
    options.allocate = [](size_t bytes) -> void* {
      void* data = nullptr;
      // Portable: every device of the process reads it by DMA, whichever runs the call.
      if (cudaHostAlloc(&data, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
      }
      return data;
    };
    options.free = [](void* data) { (void)cudaFreeHost(data); };
    return new HostBufferPool(std::move(options));
  }();
  return pool;
}

DeviceThreadResources::~DeviceThreadResources() {
  // Errors cannot be reported from here; at process exit the runtime may already be gone.
  for (cudaEvent_t event : half_free_) {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
  if (staging_ != nullptr) (void)cudaFreeHost(staging_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status DeviceThreadResources::Init() {
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  if (absl::Status s = Pools().Ensure(ordinal_); !s.ok()) return s;
  KS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& event : half_free_) {
    KS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  absl::StatusOr<LaunchGate> gate = LaunchGate::Create();
  if (!gate.ok()) return gate.status();
  gate_ = *std::move(gate);
  return absl::OkStatus();
}

absl::Status DeviceThreadResources::ReserveStaging(size_t bytes) {
  const size_t want = std::min(std::max<size_t>(bytes, 2), kStagingCapBytes);
  if (staging_bytes_ >= want) return absl::OkStatus();
  // The old buffer may still be read by copies in flight on another stream of this thread.
  for (cudaEvent_t event : half_free_) KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event));
  if (staging_ != nullptr) {
    KS_CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
  }
  KS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, want));
  staging_bytes_ = want;
  return absl::OkStatus();
}

absl::Status DeviceThreadResources::Upload(const void* host, size_t bytes, void* device,
                                           cudaStream_t stream) {
  if (bytes == 0) return absl::OkStatus();
  // No wait at the end: the kernel that reads `device` follows on the same stream, and a call
  // of several inputs waits once for all of them (CudaRun), not once per input (on an H200 host
  // a decode step's five copies took 124-134 us of h2d with a wait each, 101-106 us with one).
  if (IsPageLocked(host)) {  // one DMA, no staging
    KS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
    return absl::OkStatus();
  }
  if (absl::Status s = ReserveStaging(bytes); !s.ok()) return s;
  const size_t half = staging_bytes_ / 2;
  const char* src = static_cast<const char*>(host);
  char* dst = static_cast<char*>(device);
  int which = 0;
  for (size_t done = 0; done < bytes; done += half, which ^= 1) {
    const size_t n = std::min(half, bytes - done);
    char* buffer = static_cast<char*>(staging_) + which * half;
    KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(half_free_[which]));  // its last copy is done
    cpu::SharedHostCopier().Copy(buffer, src + done, n);  // while the other half is in DMA
    KS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst + done, buffer, n, cudaMemcpyHostToDevice, stream));
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(half_free_[which], stream));
  }
  return absl::OkStatus();  // the next use of either half waits for its event
}

absl::Status DeviceThreadResources::Download(const void* device, size_t bytes, void* host,
                                             cudaStream_t stream) {
  if (bytes == 0) return absl::OkStatus();
  if (IsPageLocked(host)) {
    KS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
    KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }
  if (absl::Status s = ReserveStaging(bytes); !s.ok()) return s;
  for (cudaEvent_t event : half_free_) KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event));
  const size_t half = staging_bytes_ / 2;
  const char* src = static_cast<const char*>(device);
  char* dst = static_cast<char*>(host);
  // Piece i lands in half i % 2; piece i - 1 is copied out of the other half while it does.
  size_t pending_at = 0, pending_bytes = 0;  // the piece waiting in half `which ^ 1`
  int which = 0;
  for (size_t done = 0; done < bytes; done += half, which ^= 1) {
    const size_t n = std::min(half, bytes - done);
    char* buffer = static_cast<char*>(staging_) + which * half;
    KS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer, src + done, n, cudaMemcpyDeviceToHost, stream));
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(half_free_[which], stream));
    if (pending_bytes > 0) {
      KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(half_free_[which ^ 1]));
      cpu::SharedHostCopier().Copy(
          dst + pending_at, static_cast<char*>(staging_) + (which ^ 1) * half, pending_bytes);
    }
    pending_at = done;
    pending_bytes = n;
  }
  KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(half_free_[which ^ 1]));
  cpu::SharedHostCopier().Copy(dst + pending_at, static_cast<char*>(staging_) + (which ^ 1) * half,
                               pending_bytes);
  return absl::OkStatus();
}

absl::StatusOr<DeviceThreadResources*> ThisThreadResources(int ordinal) {
  thread_local std::map<int, std::unique_ptr<DeviceThreadResources>> per_device;
  auto it = per_device.find(ordinal);
  if (it != per_device.end()) {
    KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
    return it->second.get();
  }
  std::unique_ptr<DeviceThreadResources> made(new DeviceThreadResources(ordinal));
  if (absl::Status s = made->Init(); !s.ok()) return s;
  DeviceThreadResources* raw = made.get();
  per_device.emplace(ordinal, std::move(made));
  return raw;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ordinal_(other.ordinal_),
      ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      stream_(other.stream_),
      owned_(other.owned_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    ordinal_ = other.ordinal_;
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    stream_ = other.stream_;
    owned_ = other.owned_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

void DeviceBuffer::Release() {
  if (ptr_ == nullptr) return;
  if (!owned_) {
    ptr_ = nullptr;
    size_ = 0;
    return;
  }
  // Errors cannot be reported from a destructor. If the stream is gone (its thread exited),
  // free synchronously instead.
  if (cudaSetDevice(ordinal_) == cudaSuccess && cudaFreeAsync(ptr_, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(ptr_);
  }
  ptr_ = nullptr;
  size_ = 0;
}

DeviceBuffer DeviceBuffer::View(void* data, size_t bytes) {
  DeviceBuffer buffer;
  buffer.ptr_ = data;
  buffer.size_ = bytes;
  buffer.owned_ = false;
  return buffer;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int ordinal, size_t bytes,
                                                    cudaStream_t stream) {
  DeviceBuffer buffer;
  buffer.ordinal_ = ordinal;
  buffer.stream_ = stream;
  if (bytes == 0) return buffer;
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaError_t error = cudaMallocAsync(&buffer.ptr_, bytes, stream);
  if (error == cudaErrorMemoryAllocation) {
    // The pool may hold freed blocks that do not fit this request: give them back and retry.
    (void)cudaGetLastError();
    cudaMemPool_t pool;
    KS_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    KS_CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
    error = cudaMallocAsync(&buffer.ptr_, bytes, stream);
    // Another call on this GPU may hold the memory for a moment (a large call that does not fit
    // holds what it got until it fails). A small allocation waits a little for it, so that the
    // call that cannot fit fails alone; a large one fails now, giving its memory back at once.
    constexpr size_t kPatientBytes = size_t{16} << 20;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (error == cudaErrorMemoryAllocation && bytes <= kPatientBytes &&
           std::chrono::steady_clock::now() < give_up) {
      (void)cudaGetLastError();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      KS_CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
      error = cudaMallocAsync(&buffer.ptr_, bytes, stream);
    }
  }
  if (error != cudaSuccess) {
    buffer.ptr_ = nullptr;
    return CudaStatus(error, "cudaMallocAsync(" + std::to_string(bytes) + " bytes)");
  }
  buffer.size_ = bytes;
  return buffer;
}

}  // namespace kernelserve::cuda
