// Host memory that a tensor can borrow from elsewhere: a block from a pool of page-locked
// memory, which the GPU reads and writes by DMA, returned to its pool when the last holder
// lets go.
#ifndef KERNELSERVE_CORE_HOST_BUFFER_H_
#define KERNELSERVE_CORE_HOST_BUFFER_H_

#include <cstddef>
#include <functional>
#include <memory>

namespace kernelserve {

// `size` bytes at `data`, handed back through a release function when destroyed.
// Thread safety: the object is immutable; its bytes follow the rules of their holder (a Tensor
// that owns the buffer, a gRPC slice that reads it).
class HostBuffer {
 public:
  // Called once, from the destructor, with the data pointer.
  using Release = std::function<void(void* data)>;

  // REQUIRES: `data` holds `size` bytes until `release` runs. `view`: the bytes are a place
  // the user names (a shared-memory region), so copies of a tensor holding the buffer share it
  // instead of copying the bytes. `device`: the GPU whose memory holds them (a CUDA
  // shared-memory region; then `view` too), -1 for host memory.
  HostBuffer(void* data, size_t size, bool pinned, Release release, bool view = false,
             int device = -1)
      : data_(data),
        size_(size),
        pinned_(pinned),
        view_(view || device >= 0),
        device_(device),
        release_(std::move(release)) {}
  ~HostBuffer() {
    if (release_) release_(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Page-locked: a device copies to or from it by DMA, without staging.
  bool pinned() const { return pinned_; }
  // Copies of a tensor share the buffer rather than copy its bytes.
  bool view() const { return view_; }
  // The GPU ordinal whose memory `data` points into; -1 = host memory (readable here).
  int device() const { return device_; }

 private:
  void* const data_;
  const size_t size_;
  const bool pinned_;
  const bool view_;
  const int device_;
  Release release_;
};

// Where large tensor bytes go when they arrive (the request parser) or leave a device.
// Thread safety: implementations are thread-safe.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // A buffer of exactly `bytes` bytes (contents unspecified), or nullptr when this allocator
  // does not give one now: below its smallest size, at its limit, or the allocation failed.
  // The caller then uses ordinary heap memory; nullptr is never an error.
  virtual std::shared_ptr<HostBuffer> TryAllocate(size_t bytes) = 0;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_HOST_BUFFER_H_
