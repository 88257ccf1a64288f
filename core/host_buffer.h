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

  // REQUIRES: `data` holds `size` bytes until `release` runs.
  HostBuffer(void* data, size_t size, bool pinned, Release release)
      : data_(data), size_(size), pinned_(pinned), release_(std::move(release)) {}
  ~HostBuffer() {
    if (release_) release_(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Page-locked: a device copies to or from it by DMA, without staging.
  bool pinned() const { return pinned_; }

 private:
  void* const data_;
  const size_t size_;
  const bool pinned_;
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
