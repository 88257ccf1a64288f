#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve::server {
namespace {

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

// Printable ASCII: '!' to '~', and ' ' when `space`.
bool Printable(char c, bool space) { return (c > ' ' && c <= '~') || (space && c == ' '); }

// The index of the first byte of `text` that is not Printable(space) or is `banned` (a
// printable character refused as well; '\0' = none); npos when every one is fine.
size_t FirstBad(std::string_view text, bool space, char banned) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!Printable(text[i], space) || text[i] == banned) return i;
  }
  return std::string_view::npos;
}

// " (byte I is 0xNN)" for a bad byte at `at` of `text`; "" for npos.
std::string BadByte(std::string_view text, size_t at) {
  if (at == std::string_view::npos) return "";
  return absl::StrCat(" (byte ", at, " is 0x",
                      absl::Hex(static_cast<unsigned char>(text[at]), absl::kZeroPad2), ")");
}

std::string NotRegistered(RegionKind kind, const std::string& name, const std::string& owner) {
  return absl::StrCat("no ", KindName(kind), "shared memory region ", Quoted(name),
                      owner == kEveryOwner ? std::string(" of any identity")
                                           : absl::StrCat(" of identity ", Quoted(owner)));
}

}  // namespace

std::string Quoted(std::string_view text) {
  constexpr size_t kShown = 64;
  return absl::StrCat("'", absl::CEscape(Sv(text.substr(0, kShown))), "'",
                      text.size() > kShown ? "..." : "");
}

absl::Status CheckPrintableName(std::string_view kind, std::string_view name, size_t max_bytes) {
  const size_t bad = FirstBad(name, /*space=*/false, '\0');
  if (!name.empty() && name.size() <= max_bytes && bad == std::string_view::npos) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(kind), " name ", Quoted(name), " (", name.size(), " bytes): expected 1 to ",
                   max_bytes, " printable ASCII characters without spaces", BadByte(name, bad)));
}

absl::Status CheckRegionName(std::string_view name) {
  return CheckPrintableName("region", name, kMaxRegionNameBytes);
}

absl::StatusOr<std::string> OwnerFor(const Caller& caller, std::string_view owner,
                                     std::string_view things) {
  if (owner.empty() || owner == caller.identity) return caller.identity;
  if (caller.admin()) return std::string(owner);
  return absl::PermissionDeniedError(
      absl::StrCat("owner ", Quoted(owner), ": only admins act on other identities' ", Sv(things),
                   "; identity '", caller.identity, "' has the ", Sv(RoleName(caller.role)),
                   " role (leave owner empty for your own ", Sv(things), ")"));
}

absl::Status CheckObjectKey(std::string_view key) {
  const std::string_view rest = key.empty() ? key : key.substr(1);
  const size_t bad = FirstBad(rest, /*space=*/true, '/');
  if (!key.empty() && key[0] == '/' && !rest.empty() && key.size() <= kMaxObjectKeyBytes &&
      bad == std::string_view::npos && rest != "." && rest != "..") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "key ", Quoted(key), " (", key.size(),
      " bytes): expected a POSIX shared-memory name, '/' then 1 to ", kMaxObjectKeyBytes - 1,
      " printable ASCII characters, none a '/', not '.' or '..'",
      BadByte(key, bad == std::string_view::npos ? bad : bad + 1)));
}

bool PinLedger::Reserve(const std::string& owner, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  int64_t& owned = by_owner_[owner];
  const bool fits =
      bytes_ + bytes <= max_bytes_ && (quota_bytes_ == 0 || owned + bytes <= quota_bytes_);
  if (fits) {
    bytes_ += bytes;
    owned += bytes;
  }
  if (owned == 0) by_owner_.erase(owner);
  return fits;
}

void PinLedger::Release(const std::string& owner, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  bytes_ -= bytes;
  auto it = by_owner_.find(owner);
  if (it == by_owner_.end()) return;
  it->second -= bytes;
  if (it->second <= 0) by_owner_.erase(it);
}

int64_t PinLedger::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status CheckObjectAccess(uid_t owner_uid, gid_t group_gid, mode_t mode,
                               const PeerCredentials& peer, std::string_view what) {
  constexpr mode_t kOwner = S_IRUSR | S_IWUSR, kGroup = S_IRGRP | S_IWGRP,
                   kOthers = S_IROTH | S_IWOTH;
  const std::string object = absl::StrFormat("the object (owner uid %u, group %u, mode 0%03o)",
                                             owner_uid, group_gid, mode & 0777);
  if (!peer.uid.has_value()) {
    if ((mode & kOthers) == kOthers) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        Sv(what), ": ", object,
        " is not readable and writable by everyone, and this server cannot tell which user "
        "calls (a TCP peer that is not on loopback); register an object with mode o+rw, or call "
        "over a Unix socket or loopback"));
  }
  const uid_t uid = *peer.uid;
  mode_t needed = kOthers;
  if (uid == owner_uid) {
    needed = kOwner;
  } else if (peer.gid.has_value() && *peer.gid == group_gid) {
    needed = kGroup;
  }
  if (uid == 0 || (mode & needed) == needed) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(Sv(what), ": ", object, " is not readable and writable by the caller (",
                   peer.DebugString(), "); a caller registers only objects it could open itself"));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::MapSystem(
    std::string owner, const PeerCredentials& peer, std::string name, std::string key,
    uint64_t offset, uint64_t byte_size) {
  const std::string what = absl::StrCat("region '", name, "' (key '", key, "')");
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(what, ": shm_open: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EMFILE || error == ENFILE) return absl::ResourceExhaustedError(message);
    return absl::InvalidArgumentError(message);
  }
  std::unique_ptr<SharedRegion> region(
      new SharedRegion(std::move(owner), std::move(name), std::move(key), offset, byte_size));
  region->fd_ = fd;  // closed by the destructor from here on
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0;
  if (sized && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a shared-memory object"));
  }
  if (sized) {
    KS_RETURN_IF_ERROR(CheckObjectAccess(st.st_uid, st.st_gid, st.st_mode, peer, what));
  }
  uint64_t end = 0;
  if (!sized || __builtin_add_overflow(offset, byte_size, &end) ||
      end > static_cast<uint64_t>(st.st_size)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", offset, " + byte_size ",
                                                   byte_size, " is past the object's ",
                                                   sized ? st.st_size : 0, " bytes"));
  }
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  region->map_offset_ = offset / page * page;
  region->map_size_ = end - region->map_offset_;
  void* mapping = mmap(nullptr, region->map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(region->map_offset_));
  if (mapping == MAP_FAILED) {
    const int error = errno;
    const std::string message = absl::StrCat(what, ": mmap: ", std::strerror(error));
    return error == ENOMEM ? absl::ResourceExhaustedError(message)
                           : absl::InvalidArgumentError(message);
  }
  region->mapping_ = mapping;
  absl::StatusOr<MappingGuard> guard = MappingGuard::Watch(mapping, region->map_size_);
  if (!guard.ok()) {
    return absl::Status(guard.status().code(), absl::StrCat(what, ": ", guard.status().message()));
  }
  region->guard_ = *std::move(guard);
  return region;
}

SharedRegion::~SharedRegion() {
  pin_.reset();
  guard_.Reset();
  if (mapping_ != nullptr) munmap(mapping_, map_size_);
  if (fd_ >= 0) close(fd_);
}

void SharedRegion::PinFor(GpuMemoryAccess& gpu, const std::shared_ptr<PinLedger>& pins) {
  if (mapping_ == nullptr) return;
  const auto bytes = static_cast<int64_t>(map_size_);
  if (!pins->Reserve(owner_, bytes)) return;  // unpinned: its copies are staged
  absl::StatusOr<std::shared_ptr<void>> pin = gpu.Pin(mapping_, map_size_);
  if (!pin.ok()) {
    pins->Release(owner_, bytes);
    return;
  }
  // The page lock and its share of the caps go together.
  pin_ = std::shared_ptr<void>(
      mapping_, [lock = *std::move(pin), pins, owner = owner_, bytes](void* /*host*/) mutable {
        lock.reset();
        pins->Release(owner, bytes);
      });
}

std::unique_ptr<SharedRegion> SharedRegion::OfGpu(std::string owner, std::string name,
                                                  std::shared_ptr<void> mapping, int device,
                                                  uint64_t byte_size) {
  std::unique_ptr<SharedRegion> region(
      new SharedRegion(std::move(owner), std::move(name), "", 0, byte_size));
  region->device_ = device;
  region->gpu_mapping_ = std::move(mapping);
  return region;
}

char* SharedRegion::data() const {
  if (gpu_mapping_ != nullptr) return static_cast<char*>(gpu_mapping_.get());
  return static_cast<char*>(mapping_) + (offset_ - map_offset_);
}

absl::Status SharedRegion::CheckObject(uint64_t offset, uint64_t byte_size,
                                       std::string_view what) const {
  if (fd_ < 0) return absl::OkStatus();  // a CUDA region
  if (damaged()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Sv(what), ": region '", name_, "' (key '", key_,
        "') is damaged: its object shrank while a call used it; unregister the region and "
        "register it again"));
  }
  // The caller checked that the range lies in the registered part: no overflow here.
  const uint64_t begin = offset_ + offset;
  const uint64_t end = begin + byte_size;
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    return absl::InternalError(
        absl::StrCat(Sv(what), ": region '", name_, "': fstat: ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) >= end) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      Sv(what), ": the object of region '", name_, "' (key '", key_, "') is ", st.st_size,
      " bytes now, and the call needs its bytes [", begin, ", ", end,
      "): it shrank since it was registered; unregister the region and register it again"));
}

bool SharedRegion::ObjectHolds(uint64_t end) const {
  struct stat st {};
  if (fd_ < 0 || fstat(fd_, &st) != 0) return true;
  return static_cast<uint64_t>(st.st_size) >= offset_ + end;
}

CallRegions::~CallRegions() { Release(); }

void CallRegions::Release() {
  for (const Held& held : regions_) held.region->calls_.fetch_sub(1, std::memory_order_relaxed);
  regions_.clear();
}

void CallRegions::Add(const RegionSpan& span) {
  const uint64_t end = static_cast<uint64_t>(span.data - span.region->data()) + span.byte_size;
  for (Held& held : regions_) {
    if (held.region == span.region) {
      held.end = std::max(held.end, end);
      return;
    }
  }
  span.region->calls_.fetch_add(1, std::memory_order_relaxed);
  regions_.push_back({span.region, end});
}

absl::Status CallRegions::CheckIntact() const {
  for (const Held& held : regions_) {
    const SharedRegion& region = *held.region;
    if (!region.damaged() && region.ObjectHolds(held.end)) continue;
    return absl::DataLossError(absl::StrCat(
        "region '", region.name(), "' (key '", region.key(),
        "'): its object shrank while this call used it; the bytes past its new end read as "
        "zeros and the outputs written there are lost; unregister the region and register it "
        "again"));
  }
  return absl::OkStatus();
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryOptions options, GpuMemoryAccess* gpu)
    : options_(std::move(options)),
      gpu_(gpu),
      pins_(std::make_shared<PinLedger>(options_.max_pinned_bytes, options_.quota_pinned_bytes)) {}

absl::Status SharedMemoryRegistry::CheckNew(const std::string& owner, const std::string& name,
                                            uint64_t byte_size) const {
  if (byte_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("region '", name, "': byte_size: expected > 0"));
  }
  auto owned = owners_.find(owner);
  const int owner_regions =
      owned == owners_.end() ? 0 : static_cast<int>(owned->second.regions.size());
  const int64_t owner_bytes = owned == owners_.end() ? 0 : owned->second.bytes;
  if (owned != owners_.end() && owned->second.regions.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("region '", name, "' is registered already; unregister it first"));
  }
  const std::string head = absl::StrCat("region '", name, "': ");
  if (regions_ >= options_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat(head, "the server holds ", regions_, " regions, --max-shared-memory-regions=",
                     options_.max_regions, "; unregister regions or raise it"));
  }
  if (owner_regions >= options_.quota_regions) {
    if (options_.on_quota_refusal) options_.on_quota_refusal(owner, "regions");
    return absl::ResourceExhaustedError(
        absl::StrCat(head, "identity '", owner, "' holds ", owner_regions,
                     " regions, --quota-shared-memory-regions=", options_.quota_regions,
                     "; unregister regions or raise it"));
  }
  const auto bytes = static_cast<int64_t>(byte_size);
  if (bytes < 0 || bytes > options_.max_bytes - bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        head, byte_size, " bytes more would pass ", bytes_,
        " of --max-shared-memory-bytes=", options_.max_bytes, "; unregister regions or raise it"));
  }
  if (options_.quota_bytes > 0 && bytes > options_.quota_bytes - owner_bytes) {
    if (options_.on_quota_refusal) options_.on_quota_refusal(owner, "shared_memory_bytes");
    return absl::ResourceExhaustedError(
        absl::StrCat(head, byte_size, " bytes more would pass identity '", owner, "''s ",
                     owner_bytes, " of --quota-shared-memory-bytes=", options_.quota_bytes,
                     "; unregister regions or raise it"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::CheckNewLocking(const std::string& owner,
                                                   const std::string& name,
                                                   uint64_t byte_size) const {
  absl::MutexLock lock(&mu_);
  return CheckNew(owner, name, byte_size);
}

absl::Status SharedMemoryRegistry::Insert(std::unique_ptr<SharedRegion> region) {
  absl::MutexLock lock(&mu_);
  if (absl::Status status = CheckNew(region->owner(), region->name(), region->byte_size());
      !status.ok()) {
    return status;
  }
  Owned& owned = owners_[region->owner()];
  const auto bytes = static_cast<int64_t>(region->byte_size());
  owned.bytes += bytes;
  bytes_ += bytes;
  ++regions_;
  const std::string name = region->name();
  owned.regions[name] = std::move(region);
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterSystem(const Caller& caller, const std::string& name,
                                                  const std::string& key, uint64_t offset,
                                                  uint64_t byte_size) {
  if (!options_.system) {
    return absl::UnimplementedError(absl::StrCat("system shared memory is off on this server (",
                                                 options_.off_reason,
                                                 "); send the tensor bytes in the request"));
  }
  if (absl::Status status = CheckRegionName(name); !status.ok()) return status;
  if (absl::Status status = CheckObjectKey(key); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("region '", name, "': ", status.message()));
  }
  if (absl::Status status = CheckNewLocking(caller.identity, name, byte_size); !status.ok()) {
    return status;
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::MapSystem(caller.identity, caller.peer, name, key, offset, byte_size);
  if (!region.ok()) return region.status();
  if (gpu_ != nullptr) (*region)->PinFor(*gpu_, pins_);  // GPU calls then copy it in one DMA
  return Insert(*std::move(region));
}

absl::Status SharedMemoryRegistry::RegisterCuda(const Caller& caller, const std::string& name,
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
  if (absl::Status status = CheckRegionName(name); !status.ok()) return status;
  if (absl::Status status = CheckNewLocking(caller.identity, name, byte_size); !status.ok()) {
    return status;
  }
  absl::StatusOr<std::shared_ptr<void>> mapping = gpu_->Open(raw_handle, device, byte_size);
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat("region '", name, "': ", mapping.status().message()));
  }
  return Insert(SharedRegion::OfGpu(caller.identity, name, *std::move(mapping), device, byte_size));
}

absl::Status SharedMemoryRegistry::Unregister(const Caller& caller, std::string_view owner,
                                              const std::string& name, RegionKind kind) {
  absl::StatusOr<std::string> scope = OwnerFor(caller, owner, "regions");
  if (!scope.ok()) return scope.status();
  // Unmapped (and unpinned) after the lock is let go, unless a call still holds them.
  std::vector<std::shared_ptr<const SharedRegion>> gone;
  {
    absl::MutexLock lock(&mu_);
    for (auto owned = owners_.begin(); owned != owners_.end();) {
      if (*scope != kEveryOwner && owned->first != *scope) {
        ++owned;
        continue;
      }
      auto& regions = owned->second.regions;
      for (auto it = regions.begin(); it != regions.end();) {
        if ((name.empty() || it->first == name) && IsKind(*it->second, kind)) {
          const auto bytes = static_cast<int64_t>(it->second->byte_size());
          owned->second.bytes -= bytes;
          bytes_ -= bytes;
          --regions_;
          gone.push_back(std::move(it->second));
          it = regions.erase(it);
        } else {
          ++it;
        }
      }
      owned = regions.empty() ? owners_.erase(owned) : std::next(owned);
    }
  }
  if (name.empty() || !gone.empty()) return absl::OkStatus();
  return absl::NotFoundError(NotRegistered(kind, name, *scope));
}

absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> SharedMemoryRegistry::List(
    const Caller& caller, std::string_view owner, const std::string& name, RegionKind kind) const {
  absl::StatusOr<std::string> scope = OwnerFor(caller, owner, "regions");
  if (!scope.ok()) return scope.status();
  std::vector<std::shared_ptr<const SharedRegion>> regions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [identity, owned] : owners_) {
      if (*scope != kEveryOwner && identity != *scope) continue;
      for (const auto& [region_name, region] : owned.regions) {
        if ((name.empty() || region_name == name) && IsKind(*region, kind)) {
          regions.push_back(region);
        }
      }
    }
  }
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(NotRegistered(kind, name, *scope));
  }
  return regions;
}

absl::StatusOr<RegionSpan> SharedMemoryRegistry::Span(const Caller& caller, const std::string& name,
                                                      uint64_t offset, uint64_t byte_size,
                                                      std::string_view what) const {
  std::shared_ptr<const SharedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    auto owned = owners_.find(caller.identity);
    if (owned != owners_.end()) {
      auto it = owned->second.regions.find(name);
      if (it != owned->second.regions.end()) region = it->second;
    }
  }
  if (region == nullptr) {
    return absl::NotFoundError(absl::StrCat(Sv(what), ": no shared memory region ", Quoted(name),
                                            " is registered by identity '", caller.identity, "'"));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end) || end > region->byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": offset ", offset, " + byte_size ",
                                                   byte_size, " is past the end of region '", name,
                                                   "' (", region->byte_size(), " bytes)"));
  }
  if (absl::Status status = region->CheckObject(offset, byte_size, what); !status.ok()) {
    return status;
  }
  RegionSpan span;
  span.data = region->data() + offset;
  span.byte_size = byte_size;
  span.region = std::move(region);
  return span;
}

}  // namespace kernelserve::server
