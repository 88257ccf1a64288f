// ResidentTensors: tensors kept on the server between calls (CreateTensor), each belonging to
// the identity that made it, by name. A call names them instead of sending their bytes: an
// input reads one in place, an output is written into one. Their bytes live in host memory or
// on a GPU (from the device's memory pool), inside a SharedRegion of their own, so that a call
// holds them (CallRegions) exactly as it holds a shared-memory region. Memory only: a restart
// loses them.
//
// Rules: a call that writes a tensor runs alone on it; calls that only read it share it
// (ResidentLease). A tensor a call holds (queued or running) is neither deleted (Delete:
// FailedPrecondition) nor expired. An idle tensor expires after its ttl (Expire). Bytes are
// capped in all, per owner and per GPU; a refusal is ResourceExhausted naming the numbers, and a
// tensor is never evicted to make room.
#ifndef KERNELSERVE_SERVER_RESIDENT_H_
#define KERNELSERVE_SERVER_RESIDENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "server/identity.h"
#include "server/shared_memory.h"

namespace kernelserve::server {

// Options of the registry. Every field has a default.
struct ResidentOptions {
  int64_t max_bytes = int64_t{4} << 30;  // resident bytes in all, at most (--max-resident-bytes)
  int64_t quota_bytes = 0;  // of one owner (--quota-resident-bytes); 0 = max_bytes only
  int max_tensors = 4096;   // tensors in all (--max-resident-tensors)
  absl::Duration default_ttl = absl::Hours(1);  // idle expiry when a create names none
  absl::Duration max_ttl = absl::Hours(24);     // the longest ttl a create may ask for
  // The bytes of resident tensors GPU `device` may hold, at most: its memory less the room its
  // calls need (the server: total memory less twice --max-inflight-bytes). Empty = no cap but
  // max_bytes.
  std::function<int64_t(int device)> gpu_room;
  // Told of each create refused by a cap: `cap` is "max_bytes", "quota_bytes", "max_tensors" or
  // "gpu_room". Called with the registry's lock held: it must not call back.
  std::function<void(const std::string& owner, const char* cap)> on_refusal;
};

// The longest resident tensor name.
inline constexpr size_t kMaxTensorNameBytes = 128;

// OK for a tensor name: 1 to kMaxTensorNameBytes printable ASCII characters, none a space.
// InvalidArgument stating the rule otherwise.
absl::Status CheckTensorName(std::string_view name);

// One resident tensor. Immutable but for its use: last_used and the lease counts, which the
// registry guards. Thread safety: thread-safe.
class ResidentTensor {
 public:
  ResidentTensor(std::string owner, std::string name, TensorSpec spec,
                 std::shared_ptr<const SharedRegion> memory, absl::Time created, absl::Duration ttl)
      : owner_(std::move(owner)),
        name_(std::move(name)),
        spec_(std::move(spec)),
        memory_(std::move(memory)),
        created_(created),
        ttl_(ttl),
        last_used_(created) {}

  const std::string& owner() const { return owner_; }
  const std::string& name() const { return name_; }
  const TensorSpec& spec() const { return spec_; }
  int device() const { return memory_->device(); }  // -1 = host memory
  uint64_t byte_size() const { return memory_->byte_size(); }
  char* data() const { return memory_->data(); }  // a GPU address when device() >= 0
  absl::Time created() const { return created_; }
  absl::Duration ttl() const { return ttl_; }
  // Calls and requests holding it now (queued or running).
  int calls() const { return memory_->calls(); }
  // The whole tensor as a span of its region, holding its memory.
  RegionSpan Span() const { return {memory_, memory_->data(), memory_->byte_size()}; }

 private:
  friend class ResidentTensors;
  friend class ResidentLease;
  const std::string owner_;
  const std::string name_;
  const TensorSpec spec_;
  const std::shared_ptr<const SharedRegion> memory_;
  const absl::Time created_;
  const absl::Duration ttl_;
  // Guarded by the registry's lock.
  absl::Time last_used_;
  int readers_ = 0;
  bool writing_ = false;
};

// A create as the registry takes it. A value type.
struct ResidentCreate {
  std::string name;
  TensorSpec spec;
  int device = -1;          // where: -1 = host memory, else a GPU ordinal
  bool any_device = false;  // the caller named none: an existing tensor matches on any device
  absl::Duration ttl;       // zero = the options' default
};

// Tensors by owner and name. Every method takes the caller; names resolve among the caller's
// tensors, and `owner` (List, Delete) is "" for the caller's own, or (admins only) another
// identity or kEveryOwner. Thread safety: thread-safe.
class ResidentTensors {
 public:
  // `gpu` (not owned, outliving the registry; nullptr = no GPUs) allocates GPU tensors.
  ResidentTensors(ResidentOptions options, GpuMemoryAccess* gpu);

  const ResidentOptions& options() const { return options_; }
  GpuMemoryAccess* gpu() const { return gpu_; }

  // Creates the caller's tensor, zeroed. When the caller has one of that name already: the
  // same spec and device (any, when create.any_device) -> that tensor with *created = false;
  // another -> AlreadyExists naming both. InvalidArgument for a bad name or spec (an empty
  // tensor, an unknown dtype) or a device the server lacks; ResourceExhausted past a cap
  // (naming it, its flag and the numbers) or when the device is out of memory.
  absl::StatusOr<std::shared_ptr<ResidentTensor>> Create(const Caller& caller,
                                                         const ResidentCreate& create,
                                                         bool* created);
  // The caller's tensor `name`. NotFound naming it (and saying idle tensors expire) otherwise.
  absl::StatusOr<std::shared_ptr<ResidentTensor>> Find(const Caller& caller,
                                                       std::string_view name) const;
  // `owner`'s tensors (`name` alone when not ""; NotFound when it is not there), by owner and
  // name. PermissionDenied for another owner named by a caller that is no admin.
  absl::StatusOr<std::vector<std::shared_ptr<const ResidentTensor>>> List(
      const Caller& caller, std::string_view owner, std::string_view name) const;
  // Deletes `owner`'s tensor `name` ("" = each of them that no call holds) and returns how many
  // went. NotFound for a name not there; FailedPrecondition naming the tensor and its calls
  // when a call holds it (nothing deleted); PermissionDenied as List.
  absl::StatusOr<int> Delete(const Caller& caller, std::string_view owner, std::string_view name);
  // Deletes each tensor idle (held by no call, last used) for longer than its ttl at `now`;
  // returns how many went.
  int Expire(absl::Time now);

  // Copies `bytes` bytes at `from` (host memory, or any GPU's) into `tensor` at byte
  // `offset`, or out of it into `to`; synchronously. REQUIRES: the range lies in the tensor,
  // and the caller holds the tensor in a lease (written for CopyIn).
  // `from_gpu`: `from` is a GPU address (a CUDA region's).
  absl::Status CopyIn(const ResidentTensor& tensor, uint64_t offset, const void* from, size_t bytes,
                      bool from_gpu = false) const;
  absl::Status CopyOut(const ResidentTensor& tensor, uint64_t offset, void* to, size_t bytes) const;

  // When a call or request last used `tensor` (its creation before any).
  absl::Time LastUsed(const ResidentTensor& tensor) const;

  // Resident bytes and tensors now, in all and by device.
  int64_t bytes() const;
  int count() const;
  std::map<int, std::pair<int64_t, int>> ByDevice() const;  // device -> (bytes, tensors)
  int64_t OwnerBytes(const std::string& owner) const;

 private:
  friend class ResidentLease;
  struct Owned {
    std::map<std::string, std::shared_ptr<ResidentTensor>, std::less<>> tensors;
    int64_t bytes = 0;
  };
  // OK when one more tensor of `bytes` on `device` fits every cap; ResourceExhausted naming the
  // cap otherwise (told to on_refusal).
  absl::Status CheckRoom(const std::string& owner, int64_t bytes, int device) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `tensor` removed from its owner's tensors. REQUIRES: it is there.
  void RemoveLocked(const ResidentTensor& tensor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The memory of a new tensor: host memory, or GPU memory through gpu_; zeroed.
  absl::StatusOr<std::shared_ptr<void>> Allocate(int device, uint64_t bytes) const;

  const ResidentOptions options_;
  GpuMemoryAccess* const gpu_;
  mutable absl::Mutex mu_;
  std::map<std::string, Owned, std::less<>> owners_ ABSL_GUARDED_BY(mu_);  // none empty
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, int64_t> device_bytes_ ABSL_GUARDED_BY(mu_);
  // Bytes of creates between their room check and their insertion (allocating meanwhile).
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The tensors one call or request reads and writes, locked together: a tensor written by one
// holder is held by no other; read, it may be read by many. Acquire takes every lock at once
// or none (so two leases never wait for each other), and the destructor gives them back.
// Marks the tensors used. Thread safety: not thread-safe (one call's).
class ResidentLease {
 public:
  explicit ResidentLease(const ResidentTensors* registry) : registry_(registry) {}
  ~ResidentLease();
  ResidentLease(const ResidentLease&) = delete;
  ResidentLease& operator=(const ResidentLease&) = delete;

  // Adds `tensor` to the lease, to read or (write = true) to write; a tensor added twice is
  // written when either says so. REQUIRES: before Acquire.
  void Add(std::shared_ptr<ResidentTensor> tensor, bool write);
  bool empty() const { return held_.empty(); }
  // Waits until every tensor can be taken as the lease asks, then takes them all. False when
  // `deadline` comes first (nothing taken). REQUIRES: not acquired yet.
  bool Acquire(absl::Time deadline = absl::InfiniteFuture());
  // Gives every tensor back now, as the destructor would (the call is done with them, before it
  // answers). Idempotent.
  void Release();
  // The tensors of the lease, for messages.
  std::string Names() const;

 private:
  struct Held {
    std::shared_ptr<ResidentTensor> tensor;
    bool write = false;
  };
  bool FreeLocked() const;  // every tensor can be taken now; under registry_->mu_
  const ResidentTensors* const registry_;
  std::vector<Held> held_;
  bool acquired_ = false;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_RESIDENT_H_
