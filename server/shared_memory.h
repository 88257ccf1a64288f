// SharedMemoryRegistry: the shared-memory regions clients on the server's host register, so
// that requests name tensors in them instead of carrying their bytes. System regions (POSIX
// shm_open objects) are mapped once, at registration, and stay mapped while a call uses them.
#ifndef KERNELSERVE_SERVER_SHARED_MEMORY_H_
#define KERNELSERVE_SERVER_SHARED_MEMORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve::server {

// A client's GPU memory as the server reaches it: CUDA IPC handles opened, bytes copied out.
// Injected into the registry (the CUDA runtime's, RuntimeGpuMemoryAccess; a fake in tests).
// Thread safety: implementations are thread-safe.
class GpuMemoryAccess {
 public:
  virtual ~GpuMemoryAccess() = default;
  // The address of the GPU buffer `raw_handle` exports, mapped on GPU `device`, unmapped when
  // the last copy of the pointer goes. InvalidArgument for a handle that does not open, a GPU
  // this process lacks or an allocation smaller than `byte_size`.
  virtual absl::StatusOr<std::shared_ptr<void>> Open(std::string_view raw_handle, int device,
                                                     uint64_t byte_size) = 0;
  // Copies `bytes` bytes at `gpu` (an address Open gave, plus an offset) to `host`.
  virtual absl::Status CopyToHost(void* host, const void* gpu, size_t bytes) = 0;
  // Page-locks `bytes` host bytes at `host` (a system region's mapping) until the returned
  // handle goes, so that the GPUs copy to and from them in one DMA.
  virtual absl::StatusOr<std::shared_ptr<void>> Pin(void* host, size_t bytes) = 0;
};

// The CUDA runtime's GpuMemoryAccess; nullptr in builds without CUDA.
std::unique_ptr<GpuMemoryAccess> RuntimeGpuMemoryAccess();

// A mapped region: a system one (a POSIX shared-memory object) or a CUDA one (a client's GPU
// buffer). Unmapped when the last holder (the registry, a call) lets go.
// Thread safety: immutable; its bytes are the clients' to synchronize.
class SharedRegion {
 public:
  // Maps `byte_size` bytes at `offset` of the shm_open object `key`. NotFound when there is no
  // such object, InvalidArgument when it cannot be opened or mapped or is smaller than
  // offset + byte_size (naming the sizes).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> MapSystem(std::string name, std::string key,
                                                                 uint64_t offset,
                                                                 uint64_t byte_size);
  // A CUDA region of `byte_size` bytes at `mapping` (from GpuMemoryAccess::Open) on GPU
  // `device`.
  static std::unique_ptr<SharedRegion> OfGpu(std::string name, std::shared_ptr<void> mapping,
                                             int device, uint64_t byte_size);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }  // "" for a CUDA region
  // The GPU whose memory it is; -1 for a system region (host memory).
  int device() const { return device_; }
  // A system region page-locked for the GPUs (copies to and from it are one DMA).
  bool pinned() const { return pin_ != nullptr; }
  // Page-locks the system region's mapping through `gpu`; the region stays unpinned (and
  // usable) when that fails. REQUIRES: not shared yet (called before registering it).
  void PinFor(GpuMemoryAccess& gpu);
  uint64_t offset() const { return offset_; }  // of the registered part in the object
  uint64_t byte_size() const { return byte_size_; }
  // The registered part's first byte (a GPU address for a CUDA region).
  char* data() const;

 private:
  SharedRegion(std::string name, std::string key, uint64_t offset, uint64_t byte_size)
      : name_(std::move(name)), key_(std::move(key)), offset_(offset), byte_size_(byte_size) {}

  const std::string name_;
  const std::string key_;
  const uint64_t offset_;
  const uint64_t byte_size_;
  void* mapping_ = nullptr;  // from mmap, of map_size_ bytes at page-aligned map_offset_
  uint64_t map_offset_ = 0;
  uint64_t map_size_ = 0;
  int device_ = -1;
  std::shared_ptr<void> gpu_mapping_;  // a CUDA region's
  std::shared_ptr<void> pin_;          // a pinned system region's page lock, dropped before munmap
};

// Options of the registry. Every field has a default.
struct SharedMemoryOptions {
  bool system = true;                              // system regions may be registered
  bool cuda = true;                                // CUDA regions may be registered
  int64_t max_bytes = int64_t{16} << 30;           // registered bytes in all, at most
  std::string off_reason = "--shared-memory=off";  // said when system is false
};

// `byte_size` bytes of a region at `offset` of its registered part, holding the region mapped.
// A value type.
struct RegionSpan {
  std::shared_ptr<const SharedRegion> region;
  char* data = nullptr;
  uint64_t byte_size = 0;
};

// Which regions a call of the registry means (KServe v2 keeps system and CUDA regions apart;
// kernelserve.v1 does not).
enum class RegionKind { kAny, kSystem, kCuda };

// Thread safety: thread-safe.
class SharedMemoryRegistry {
 public:
  // `gpu` (not owned, outliving the registry; nullptr = no GPUs) opens CUDA regions.
  explicit SharedMemoryRegistry(SharedMemoryOptions options, GpuMemoryAccess* gpu = nullptr)
      : options_(std::move(options)), gpu_(gpu) {}

  // True when system regions may be registered.
  bool system() const { return options_.system; }
  // True when CUDA regions may be registered (on and a GPU to open them on).
  bool cuda() const { return options_.cuda && gpu_ != nullptr; }
  // Where CUDA regions' bytes are read from the host; nullptr without GPUs.
  GpuMemoryAccess* gpu() const { return gpu_; }

  // Maps and registers a system region under `name`. Unimplemented when system regions are
  // off; InvalidArgument for an empty name or size or a bad key or range; NotFound for a key
  // that does not exist; AlreadyExists for a name taken; ResourceExhausted past max_bytes.
  absl::Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                              uint64_t byte_size);
  // Opens and registers the GPU buffer that `raw_handle` (a cudaIpcMemHandle_t) exports, on
  // GPU `device`, as CUDA region `name`. Unimplemented when CUDA regions are off or there is
  // no GPU; errors as RegisterSystem otherwise (InvalidArgument for a handle that does not
  // open).
  absl::Status RegisterCuda(const std::string& name, std::string_view raw_handle, int device,
                            uint64_t byte_size);
  // Forgets `name` ("" = every region) of `kind`; calls using it keep it mapped until they
  // end. NotFound for a name not registered as that kind.
  absl::Status Unregister(const std::string& name, RegionKind kind = RegionKind::kAny);
  // The regions of `kind` registered now (`name` alone when not ""; NotFound when it is not
  // there as that kind).
  absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> List(
      const std::string& name, RegionKind kind = RegionKind::kAny) const;
  // [offset, offset + byte_size) of region `name`'s registered part. `what` names the tensor
  // in errors: NotFound for an unknown region, InvalidArgument for a range past its end.
  absl::StatusOr<RegionSpan> Span(const std::string& name, uint64_t offset, uint64_t byte_size,
                                  std::string_view what) const;

 private:
  // InvalidArgument for an empty name or size, AlreadyExists for a name taken,
  // ResourceExhausted when `byte_size` more would pass max_bytes.
  absl::Status CheckNew(const std::string& name, uint64_t byte_size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckNew again (another registration may have come in meanwhile), then adds `region`.
  absl::Status Insert(std::unique_ptr<SharedRegion> region);

  const SharedMemoryOptions options_;
  GpuMemoryAccess* const gpu_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const SharedRegion>> regions_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SHARED_MEMORY_H_
