#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::server {
namespace {

std::string Short(std::string_view text) { return std::string(text.substr(0, 64)); }

bool IsKind(const SharedRegion& region, RegionKind kind) {
  switch (kind) {
    case RegionKind::kSystem:
      return region.device() < 0;
    case RegionKind::kCuda:
      return region.device() >= 0;
    default:
      return true;
  }
}

// "system ", "CUDA " or "" (kAny), for messages.
const char* KindName(RegionKind kind) {
  switch (kind) {
    case RegionKind::kSystem:
      return "system ";
    case RegionKind::kCuda:
      return "CUDA ";
    default:
      return "";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::MapSystem(std::string name,
                                                                      std::string key,
                                                                      uint64_t offset,
                                                                      uint64_t byte_size) {
  const std::string what = absl::StrCat("region '", Short(name), "' (key '", Short(key), "')");
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(what, ": shm_open: ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
  }
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0;
  uint64_t end = 0;
  if (!sized || __builtin_add_overflow(offset, byte_size, &end) ||
      end > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", offset, " + byte_size ",
                                                   byte_size, " is past the object's ",
                                                   sized ? st.st_size : 0, " bytes"));
  }
  std::unique_ptr<SharedRegion> region(
      new SharedRegion(std::move(name), std::move(key), offset, byte_size));
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  region->map_offset_ = offset / page * page;
  region->map_size_ = end - region->map_offset_;
  void* mapping = mmap(nullptr, region->map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(region->map_offset_));
  const int error = errno;
  close(fd);
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": mmap: ", std::strerror(error)));
  }
  region->mapping_ = mapping;
  return region;
}

SharedRegion::~SharedRegion() {
  pin_.reset();
  if (mapping_ != nullptr) munmap(mapping_, map_size_);
}

void SharedRegion::PinFor(GpuMemoryAccess& gpu) {
  if (mapping_ == nullptr) return;
  absl::StatusOr<std::shared_ptr<void>> pin = gpu.Pin(mapping_, map_size_);
  if (pin.ok()) pin_ = *std::move(pin);
}

std::unique_ptr<SharedRegion> SharedRegion::OfGpu(std::string name, std::shared_ptr<void> mapping,
                                                  int device, uint64_t byte_size) {
  std::unique_ptr<SharedRegion> region(new SharedRegion(std::move(name), "", 0, byte_size));
  region->device_ = device;
  region->gpu_mapping_ = std::move(mapping);
  return region;
}

char* SharedRegion::data() const {
  if (gpu_mapping_ != nullptr) return static_cast<char*>(gpu_mapping_.get());
  return static_cast<char*>(mapping_) + (offset_ - map_offset_);
}

absl::Status SharedMemoryRegistry::CheckNew(const std::string& name, uint64_t byte_size) const {
  if (name.empty()) return absl::InvalidArgumentError("name: expected a region name");
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region '", Short(name), "': byte_size: expected > 0"));
  }
  if (regions_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("region '", Short(name), "' is registered already; unregister it first"));
  }
  if (static_cast<int64_t>(byte_size) < 0 ||
      bytes_ + static_cast<int64_t>(byte_size) > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region '", Short(name), "': ", byte_size, " bytes more would pass ", bytes_, " of ",
        "--max-shared-memory-bytes=", options_.max_bytes, "; unregister regions or raise it"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Insert(std::unique_ptr<SharedRegion> region) {
  absl::MutexLock lock(&mu_);
  if (absl::Status status = CheckNew(region->name(), region->byte_size()); !status.ok()) {
    return status;
  }
  bytes_ += static_cast<int64_t>(region->byte_size());
  const std::string name = region->name();
  regions_[name] = std::move(region);
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterSystem(const std::string& name, const std::string& key,
                                                  uint64_t offset, uint64_t byte_size) {
  if (!options_.system) {
    return absl::UnimplementedError(absl::StrCat("system shared memory is off on this server (",
                                                 options_.off_reason,
                                                 "); send the tensor bytes in the request"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status = CheckNew(name, byte_size); !status.ok()) return status;
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::MapSystem(name, key, offset, byte_size);
  if (!region.ok()) return region.status();
  if (gpu_ != nullptr) (*region)->PinFor(*gpu_);  // GPU calls then copy it in one DMA
  return Insert(*std::move(region));
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& name,
                                                std::string_view raw_handle, int device,
                                                uint64_t byte_size) {
  if (!options_.cuda) {
    return absl::UnimplementedError(absl::StrCat("CUDA shared memory is off on this server (",
                                                 options_.off_reason,
                                                 "); send the tensor bytes in the request"));
  }
  if (gpu_ == nullptr) {
    return absl::UnimplementedError(
        "CUDA shared memory needs a GPU, and this server has none; use system shared memory "
        "or send the tensor bytes in the request");
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status = CheckNew(name, byte_size); !status.ok()) return status;
  }
  absl::StatusOr<std::shared_ptr<void>> mapping = gpu_->Open(raw_handle, device, byte_size);
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat("region '", Short(name), "': ", mapping.status().message()));
  }
  return Insert(SharedRegion::OfGpu(name, *std::move(mapping), device, byte_size));
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& name, RegionKind kind) {
  absl::MutexLock lock(&mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if ((name.empty() || it->first == name) && IsKind(*it->second, kind)) {
      bytes_ -= static_cast<int64_t>(it->second->byte_size());
      it = regions_.erase(it);
      if (!name.empty()) return absl::OkStatus();
    } else {
      ++it;
    }
  }
  if (name.empty()) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("no ", KindName(kind), "shared memory region '", Short(name), "'"));
}

absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> SharedMemoryRegistry::List(
    const std::string& name, RegionKind kind) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const SharedRegion>> regions;
  for (const auto& [key, region] : regions_) {
    if ((name.empty() || key == name) && IsKind(*region, kind)) regions.push_back(region);
  }
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no ", KindName(kind), "shared memory region '", Short(name), "'"));
  }
  return regions;
}

absl::StatusOr<RegionSpan> SharedMemoryRegistry::Span(const std::string& name, uint64_t offset,
                                                      uint64_t byte_size,
                                                      std::string_view what) const {
  std::shared_ptr<const SharedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it != regions_.end()) region = it->second;
  }
  if (region == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(Sv(what), ": no shared memory region '", Short(name), "' is registered"));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end) || end > region->byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(what), ": offset ", offset, " + byte_size ", byte_size, " is past the end of region '",
        Short(name), "' (", region->byte_size(), " bytes)"));
  }
  RegionSpan span;
  span.data = region->data() + offset;
  span.byte_size = byte_size;
  span.region = std::move(region);
  return span;
}

}  // namespace kernelserve::server
