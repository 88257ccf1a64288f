#include "server/resident.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace kernelserve::server {
namespace {

std::string Where(int device) { return device < 0 ? "host memory" : absl::StrCat("GPU ", device); }

// Host memory for a tensor: 64-byte aligned (what kernels' vector loads want), zeroed.
std::shared_ptr<void> HostMemory(uint64_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
  void* memory = std::aligned_alloc(kAlign, rounded);
  if (memory == nullptr) return nullptr;
  std::memset(memory, 0, rounded);
  return std::shared_ptr<void>(memory, [](void* p) { std::free(p); });
}

}  // namespace

absl::Status CheckTensorName(std::string_view name) {
  return CheckPrintableName("tensor", name, kMaxTensorNameBytes);
}

ResidentTensors::ResidentTensors(ResidentOptions options, GpuMemoryAccess* gpu)
    : options_(std::move(options)), gpu_(gpu) {}

absl::StatusOr<std::shared_ptr<void>> ResidentTensors::Allocate(int device, uint64_t bytes) const {
  if (device >= 0) {
    if (gpu_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, ": this server has no GPUs; leave device unset or -1"));
    }
    return gpu_->Allocate(device, bytes);
  }
  std::shared_ptr<void> memory = HostMemory(bytes);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host memory: no room for ", bytes, " more bytes"));
  }
  return memory;
}

absl::Status ResidentTensors::CheckRoom(const std::string& owner, int64_t bytes, int device) const {
  auto refuse = [&](const char* cap, const std::string& message) {
    if (options_.on_refusal) options_.on_refusal(owner, cap);
    return absl::ResourceExhaustedError(message);
  };
  if (count_ >= options_.max_tensors) {
    return refuse("max_tensors", absl::StrCat("the server holds ", count_,
                                              " resident tensors, its most "
                                              "(--max-resident-tensors); delete some first"));
  }
  const int64_t held = bytes_ + pending_bytes_;
  if (bytes > options_.max_bytes - held) {
    return refuse(
        "max_bytes",
        absl::StrCat(bytes, " more bytes would pass --max-resident-bytes=", options_.max_bytes,
                     ": ", held, " bytes are resident (of every identity); delete tensors first"));
  }
  auto owned = owners_.find(owner);
  const int64_t own = owned == owners_.end() ? 0 : owned->second.bytes;
  if (options_.quota_bytes > 0 && bytes > options_.quota_bytes - own) {
    return refuse("quota_bytes",
                  absl::StrCat(bytes, " more bytes would pass the quota of identity '", owner,
                               "' (--quota-resident-bytes=", options_.quota_bytes, "): it holds ",
                               own, "; delete tensors first"));
  }
  if (device >= 0 && options_.gpu_room) {
    const int64_t room = options_.gpu_room(device);
    auto on_device = device_bytes_.find(device);
    const int64_t there = on_device == device_bytes_.end() ? 0 : on_device->second;
    if (bytes > room - there) {
      return refuse("gpu_room",
                    absl::StrCat(bytes, " more bytes would pass the ", room,
                                 " bytes of resident tensors GPU ", device,
                                 " may hold (its memory less twice --max-inflight-bytes, kept for "
                                 "calls): it holds ",
                                 there, "; delete tensors or place this one elsewhere"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentTensor>> ResidentTensors::Create(
    const Caller& caller, const ResidentCreate& create, bool* created) {
  *created = false;
  KS_RETURN_IF_ERROR(CheckTensorName(create.name));
  const std::string what = absl::StrCat("tensor '", create.name, "'");
  absl::StatusOr<int64_t> bytes = SpecBytes(create.spec);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.status().message()));
  if (*bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", create.spec.DebugString(),
                                                   " holds no bytes; expected a shape "
                                                   "of at least one element"));
  }
  absl::Duration ttl = create.ttl <= absl::ZeroDuration() ? options_.default_ttl : create.ttl;
  ttl = std::min(ttl, options_.max_ttl);
  {
    absl::MutexLock lock(&mu_);
    auto owned = owners_.find(caller.identity);
    if (owned != owners_.end()) {
      if (auto found = owned->second.tensors.find(create.name);
          found != owned->second.tensors.end()) {
        const ResidentTensor& old = *found->second;
        if (old.spec() == create.spec && (create.any_device || old.device() == create.device)) {
          found->second->last_used_ = absl::Now();
          return found->second;
        }
        return absl::AlreadyExistsError(
            absl::StrCat(what, " exists as ", old.spec().DebugString(), " in ", Where(old.device()),
                         "; asked for ", create.spec.DebugString(), " in ", Where(create.device),
                         ": delete it first or choose another name"));
      }
    }
    KS_RETURN_IF_ERROR(CheckRoom(caller.identity, *bytes, create.device));
    pending_bytes_ += *bytes;
  }
  absl::StatusOr<std::shared_ptr<void>> memory =
      Allocate(create.device, static_cast<uint64_t>(*bytes));
  absl::MutexLock lock(&mu_);
  pending_bytes_ -= *bytes;
  if (!memory.ok()) {
    if (absl::IsResourceExhausted(memory.status()) && options_.on_refusal) {
      options_.on_refusal(caller.identity, "out_of_memory");
    }
    return absl::Status(memory.status().code(),
                        absl::StrCat(what, ": ", memory.status().message()));
  }
  if (auto owner = owners_.find(caller.identity); owner != owners_.end()) {
    if (auto found = owner->second.tensors.find(create.name);
        found != owner->second.tensors.end()) {
      // A create of the same name won the race while this one allocated.
      if (found->second->spec() == create.spec && found->second->device() == create.device) {
        return found->second;
      }
      return absl::AlreadyExistsError(
          absl::StrCat(what, " was created meanwhile as ", found->second->spec().DebugString()));
    }
  }
  // Again: other creates may have come in while this one allocated (the first check counted
  // them only in max_bytes).
  KS_RETURN_IF_ERROR(CheckRoom(caller.identity, *bytes, create.device));
  Owned& owned = owners_[caller.identity];
  std::shared_ptr<const SharedRegion> region =
      SharedRegion::OfGpu(caller.identity, create.name, *std::move(memory), create.device,
                          static_cast<uint64_t>(*bytes));
  auto tensor = std::make_shared<ResidentTensor>(caller.identity, create.name, create.spec,
                                                 std::move(region), absl::Now(), ttl);
  owned.tensors.emplace(create.name, tensor);
  owned.bytes += *bytes;
  bytes_ += *bytes;
  device_bytes_[create.device] += *bytes;
  ++count_;
  *created = true;
  return tensor;
}

absl::StatusOr<std::shared_ptr<ResidentTensor>> ResidentTensors::Find(const Caller& caller,
                                                                      std::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto owned = owners_.find(caller.identity);
  if (owned != owners_.end()) {
    if (auto found = owned->second.tensors.find(name); found != owned->second.tensors.end()) {
      return found->second;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "no resident tensor ", Quoted(name), " of identity '", caller.identity,
      "' (create it with CreateTensor; an idle tensor expires after its ttl, and a restart "
      "loses every one)"));
}

absl::StatusOr<std::vector<std::shared_ptr<const ResidentTensor>>> ResidentTensors::List(
    const Caller& caller, std::string_view owner, std::string_view name) const {
  KS_ASSIGN_OR_RETURN(const std::string scope, OwnerFor(caller, owner, "tensors"));
  std::vector<std::shared_ptr<const ResidentTensor>> listed;
  absl::MutexLock lock(&mu_);
  for (const auto& [who, owned] : owners_) {
    if (scope != kEveryOwner && who != scope) continue;
    for (const auto& [tensor_name, tensor] : owned.tensors) {
      if (name.empty() || tensor_name == name) listed.push_back(tensor);
    }
  }
  if (!name.empty() && listed.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no resident tensor ", Quoted(name), " of identity ", Quoted(scope)));
  }
  return listed;
}

void ResidentTensors::RemoveLocked(const ResidentTensor& tensor) {
  auto owned = owners_.find(tensor.owner());
  const auto bytes = static_cast<int64_t>(tensor.byte_size());
  owned->second.bytes -= bytes;
  bytes_ -= bytes;
  device_bytes_[tensor.device()] -= bytes;
  --count_;
  owned->second.tensors.erase(tensor.name());
  if (owned->second.tensors.empty()) owners_.erase(owned);
}

absl::StatusOr<int> ResidentTensors::Delete(const Caller& caller, std::string_view owner,
                                            std::string_view name) {
  KS_ASSIGN_OR_RETURN(const std::string scope, OwnerFor(caller, owner, "tensors"));
  // Freed after the lock is let go.
  std::vector<std::shared_ptr<ResidentTensor>> gone;
  absl::MutexLock lock(&mu_);
  for (auto& [who, owned] : owners_) {
    if (scope != kEveryOwner && who != scope) continue;
    for (auto& [tensor_name, tensor] : owned.tensors) {
      if (!name.empty() && tensor_name != name) continue;
      if (tensor->calls() > 0) {
        if (name.empty()) continue;  // "every one": those no call holds
        return absl::FailedPreconditionError(absl::StrCat("resident tensor ", Quoted(name),
                                                          " is held by ", tensor->calls(),
                                                          " call(s) now; delete it once they end"));
      }
      gone.push_back(tensor);
    }
  }
  if (!name.empty() && gone.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no resident tensor ", Quoted(name), " of identity ", Quoted(scope)));
  }
  for (const auto& tensor : gone) RemoveLocked(*tensor);
  return static_cast<int>(gone.size());
}

int ResidentTensors::Expire(absl::Time now) {
  std::vector<std::shared_ptr<ResidentTensor>> gone;
  absl::MutexLock lock(&mu_);
  for (auto& [who, owned] : owners_) {
    for (auto& [name, tensor] : owned.tensors) {
      const bool idle = tensor->calls() == 0 && tensor->readers_ == 0 && !tensor->writing_;
      if (idle && now - tensor->last_used_ > tensor->ttl()) gone.push_back(tensor);
    }
  }
  for (const auto& tensor : gone) RemoveLocked(*tensor);
  return static_cast<int>(gone.size());
}

absl::Status ResidentTensors::CopyIn(const ResidentTensor& tensor, uint64_t offset,
                                     const void* from, size_t bytes, bool from_gpu) const {
  char* to = tensor.data() + offset;
  if (tensor.device() < 0 && !from_gpu) {
    std::memcpy(to, from, bytes);
    return absl::OkStatus();
  }
  if (gpu_ == nullptr) return absl::InternalError("GPU memory without GPU access");
  return tensor.device() < 0 ? gpu_->CopyToHost(to, from, bytes)
                             : gpu_->CopyFromHost(to, from, bytes);
}

absl::Time ResidentTensors::LastUsed(const ResidentTensor& tensor) const {
  absl::MutexLock lock(&mu_);
  return tensor.last_used_;
}

absl::Status ResidentTensors::CopyOut(const ResidentTensor& tensor, uint64_t offset, void* to,
                                      size_t bytes) const {
  const char* from = tensor.data() + offset;
  if (tensor.device() < 0) {
    std::memcpy(to, from, bytes);
    return absl::OkStatus();
  }
  return gpu_->CopyToHost(to, from, bytes);
}

int64_t ResidentTensors::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

int ResidentTensors::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

std::map<int, std::pair<int64_t, int>> ResidentTensors::ByDevice() const {
  std::map<int, std::pair<int64_t, int>> by_device;
  absl::MutexLock lock(&mu_);
  for (const auto& [device, bytes] : device_bytes_) by_device[device].first = bytes;
  for (const auto& [who, owned] : owners_) {
    for (const auto& [name, tensor] : owned.tensors) ++by_device[tensor->device()].second;
  }
  return by_device;
}

int64_t ResidentTensors::OwnerBytes(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  auto owned = owners_.find(owner);
  return owned == owners_.end() ? 0 : owned->second.bytes;
}

ResidentLease::~ResidentLease() { Release(); }

void ResidentLease::Release() {
  if (!acquired_) return;
  acquired_ = false;
  absl::MutexLock lock(&registry_->mu_);
  const absl::Time now = absl::Now();
  for (Held& held : held_) {
    ResidentTensor& tensor = *held.tensor;
    if (held.write) {
      tensor.writing_ = false;
    } else {
      --tensor.readers_;
    }
    tensor.last_used_ = now;
  }
}

void ResidentLease::Add(std::shared_ptr<ResidentTensor> tensor, bool write) {
  for (Held& held : held_) {
    if (held.tensor == tensor) {
      held.write = held.write || write;
      return;
    }
  }
  held_.push_back({std::move(tensor), write});
}

bool ResidentLease::FreeLocked() const {
  for (const Held& held : held_) {
    if (held.tensor->writing_ || (held.write && held.tensor->readers_ > 0)) return false;
  }
  return true;
}

bool ResidentLease::Acquire(absl::Time deadline) {
  if (held_.empty()) return true;
  registry_->mu_.Lock();
  const bool free =
      registry_->mu_.AwaitWithDeadline(absl::Condition(this, &ResidentLease::FreeLocked), deadline);
  if (free) {
    const absl::Time now = absl::Now();
    for (Held& held : held_) {
      if (held.write) {
        held.tensor->writing_ = true;
      } else {
        ++held.tensor->readers_;
      }
      held.tensor->last_used_ = now;
    }
    acquired_ = true;
  }
  registry_->mu_.Unlock();
  return free;
}

std::string ResidentLease::Names() const {
  std::vector<std::string> names;
  for (const Held& held : held_) {
    names.push_back(absl::StrCat("'", held.tensor->name(), "'", held.write ? " (written)" : ""));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace kernelserve::server
