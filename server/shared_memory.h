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

// A mapped system region. Unmapped when the last holder (the registry, a call) lets go.
// Thread safety: immutable; its bytes are the clients' to synchronize.
class SharedRegion {
 public:
  // Maps `byte_size` bytes at `offset` of the shm_open object `key`. NotFound when there is no
  // such object, InvalidArgument when it cannot be opened or mapped or is smaller than
  // offset + byte_size (naming the sizes).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> MapSystem(std::string name, std::string key,
                                                                 uint64_t offset,
                                                                 uint64_t byte_size);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }  // of the registered part in the object
  uint64_t byte_size() const { return byte_size_; }
  // The registered part's first byte.
  char* data() const { return static_cast<char*>(mapping_) + (offset_ - map_offset_); }

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
};

// Options of the registry. Every field has a default.
struct SharedMemoryOptions {
  bool system = true;                              // system regions may be registered
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

// Thread safety: thread-safe.
class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryOptions options) : options_(std::move(options)) {}

  // True when system regions may be registered.
  bool system() const { return options_.system; }

  // Maps and registers a system region under `name`. Unimplemented when system regions are
  // off; InvalidArgument for an empty name or size or a bad key or range; NotFound for a key
  // that does not exist; AlreadyExists for a name taken; ResourceExhausted past max_bytes.
  absl::Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                              uint64_t byte_size);
  // Forgets `name` ("" = every region); calls using it keep it mapped until they end. NotFound
  // for a name not registered.
  absl::Status Unregister(const std::string& name);
  // The regions registered now (`name` alone when not ""; NotFound when it is not there).
  absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> List(
      const std::string& name) const;
  // [offset, offset + byte_size) of region `name`'s registered part. `what` names the tensor
  // in errors: NotFound for an unknown region, InvalidArgument for a range past its end.
  absl::StatusOr<RegionSpan> Span(const std::string& name, uint64_t offset, uint64_t byte_size,
                                  std::string_view what) const;

 private:
  const SharedMemoryOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const SharedRegion>> regions_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SHARED_MEMORY_H_
