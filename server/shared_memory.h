// SharedMemoryRegistry: the shared-memory regions clients on the server's host register, so
// that requests name tensors in them instead of carrying their bytes. Each region belongs to the
// identity that registered it (its owner): a call resolves names among its caller's own regions
// only, and only admins see or remove other identities' regions. System regions (POSIX shm_open
// objects) are mapped once, at registration, and stay mapped while a call uses them; their
// objects' sizes are checked before each use, and a fault from an object shrunk during a call
// is caught (server/region_guard.h).
#ifndef KERNELSERVE_SERVER_SHARED_MEMORY_H_
#define KERNELSERVE_SERVER_SHARED_MEMORY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/identity.h"
#include "server/region_guard.h"

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
  // `bytes` bytes of GPU `device`'s memory from its memory pool (the one calls use), zeroed,
  // given back when the last copy of the pointer goes. ResourceExhausted when the GPU is out of
  // memory; InvalidArgument for a GPU this process lacks.
  virtual absl::StatusOr<std::shared_ptr<void>> Allocate(int device, uint64_t bytes) = 0;
  // Copies `bytes` bytes at `host` (host memory, or another GPU address) to `gpu` (an address
  // Allocate or Open gave, plus an offset), synchronously: one DMA from page-locked memory.
  virtual absl::Status CopyFromHost(void* gpu, const void* host, size_t bytes) = 0;
};

// The CUDA runtime's GpuMemoryAccess; nullptr in builds without CUDA.
std::unique_ptr<GpuMemoryAccess> RuntimeGpuMemoryAccess();

// The longest region name.
inline constexpr size_t kMaxRegionNameBytes = 128;
// The longest shm_open key ('/' and 254 more), as the kernel takes a file name.
inline constexpr size_t kMaxObjectKeyBytes = 255;
// The owner that stands for every identity in List and Unregister (admins only).
inline constexpr std::string_view kEveryOwner = "*";

// OK for a region name: 1 to kMaxRegionNameBytes printable ASCII characters, none a space.
// InvalidArgument stating the rule otherwise (the name shown escaped and cut).
absl::Status CheckRegionName(std::string_view name);
// OK for a name of `kind` ("region", "tensor"): 1 to `max_bytes` printable ASCII characters,
// none a space. InvalidArgument stating the rule otherwise (the name shown escaped and cut).
absl::Status CheckPrintableName(std::string_view kind, std::string_view name, size_t max_bytes);
// The owner `owner` means for the caller: its own identity for "" or its identity, else (for an
// admin) `owner` itself, kEveryOwner included. PermissionDenied for a caller that is no admin
// naming another owner, saying only admins act on other identities' `things` ("regions").
absl::StatusOr<std::string> OwnerFor(const Caller& caller, std::string_view owner,
                                     std::string_view things);
// OK for a POSIX shared-memory key: '/' then 1 to 254 printable ASCII characters (space
// included), none a '/', and not "/." or "/..". InvalidArgument stating the rule otherwise.
absl::Status CheckObjectKey(std::string_view key);
// Client text for messages: at most its first 64 bytes, C-escaped (octal), in quotes, "..." after
// them when cut. Never the raw bytes.
std::string Quoted(std::string_view text);

// Page-locked bytes of system regions within a server-wide cap and a cap per owner.
// Thread safety: thread-safe.
class PinLedger {
 public:
  // `quota_bytes` 0 = no cap per owner but `max_bytes`.
  PinLedger(int64_t max_bytes, int64_t quota_bytes)
      : max_bytes_(max_bytes), quota_bytes_(quota_bytes) {}
  // Counts `bytes` more for `owner` and returns true when both caps allow them; returns false,
  // counting nothing, otherwise.
  bool Reserve(const std::string& owner, int64_t bytes);
  // Gives back `bytes` that Reserve counted for `owner`.
  void Release(const std::string& owner, int64_t bytes);
  // Bytes counted now, in all.
  int64_t bytes() const;

 private:
  const int64_t max_bytes_;
  const int64_t quota_bytes_;
  mutable absl::Mutex mu_;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> by_owner_ ABSL_GUARDED_BY(mu_);
};

// A mapped region: a system one (a POSIX shared-memory object) or a CUDA one (a client's GPU
// buffer). Unmapped when the last holder (the registry, a call) lets go.
// Thread safety: thread-safe; immutable once shared, but for the count of calls holding it and
// the guard's damage mark, which are atomic. Its bytes are the clients' to synchronize.
class SharedRegion {
 public:
  // Maps `byte_size` bytes at `offset` of the shm_open object `key` as `owner`'s region `name`,
  // keeping the object open to check its size before each use and watching the mapping for
  // faults (MappingGuard). NotFound when there is no such object; InvalidArgument when it
  // cannot be opened or mapped or is smaller than offset + byte_size (naming the sizes);
  // ResourceExhausted when the process is out of file descriptors or guard slots.
  // PermissionDenied when `peer` (the caller's process) could not open the object for reading
  // and writing itself (CheckObjectAccess).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> MapSystem(std::string owner,
                                                                 const PeerCredentials& peer,
                                                                 std::string name, std::string key,
                                                                 uint64_t offset,
                                                                 uint64_t byte_size);
  // `owner`'s CUDA region `name` of `byte_size` bytes at `mapping` (from GpuMemoryAccess::Open)
  // on GPU `device`; with device -1, host memory at `mapping` (a resident tensor's).
  static std::unique_ptr<SharedRegion> OfGpu(std::string owner, std::string name,
                                             std::shared_ptr<void> mapping, int device,
                                             uint64_t byte_size);
  // Unpins, stops the guard, unmaps and closes the object, in that order.
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& owner() const { return owner_; }  // the identity that registered it
  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }  // "" for a CUDA region
  // The GPU whose memory it is; -1 for a system region (host memory).
  int device() const { return device_; }
  // A system region page-locked for the GPUs (copies to and from it are one DMA).
  bool pinned() const { return pin_ != nullptr; }
  // Page-locks the system region's mapping through `gpu` when `pins` has room for it (counted
  // there until the lock goes); the region stays unpinned, and usable, when it has not or
  // pinning fails. REQUIRES: not shared yet (called before registering it).
  void PinFor(GpuMemoryAccess& gpu, const std::shared_ptr<PinLedger>& pins);
  uint64_t offset() const { return offset_; }  // of the registered part in the object
  uint64_t byte_size() const { return byte_size_; }
  // The registered part's first byte (a GPU address for a CUDA region).
  char* data() const;

  // OK when a call may use bytes [offset, offset + byte_size) of the registered part: always
  // for a CUDA region; for a system region, when its object still holds them (fstat) and no
  // fault damaged the mapping. InvalidArgument naming `what`, the region, its key, the object's
  // size now and the range needed when the object shrank; FailedPrecondition when damaged.
  absl::Status CheckObject(uint64_t offset, uint64_t byte_size, std::string_view what) const;
  // True once an access past the end of the shrunk object was covered with zero pages: the
  // mapping no longer shows the object, and the calls that used it then get DataLoss.
  bool damaged() const { return guard_.damaged(); }
  // False when the system region's object is now shorter than `end` bytes of the registered
  // part (fstat); true otherwise, and for a CUDA region.
  bool ObjectHolds(uint64_t end) const;
  // The calls holding it now (see CallRegions).
  int calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  friend class CallRegions;
  SharedRegion(std::string owner, std::string name, std::string key, uint64_t offset,
               uint64_t byte_size)
      : owner_(std::move(owner)),
        name_(std::move(name)),
        key_(std::move(key)),
        offset_(offset),
        byte_size_(byte_size) {}

  const std::string owner_;
  const std::string name_;
  const std::string key_;
  const uint64_t offset_;
  const uint64_t byte_size_;
  int fd_ = -1;              // the system region's object, open for fstat
  void* mapping_ = nullptr;  // from mmap, of map_size_ bytes at page-aligned map_offset_
  uint64_t map_offset_ = 0;
  uint64_t map_size_ = 0;
  MappingGuard guard_;  // a system region's mapping, watched for faults
  int device_ = -1;
  std::shared_ptr<void> gpu_mapping_;  // a CUDA region's
  std::shared_ptr<void> pin_;          // a pinned system region's page lock, dropped before munmap
  mutable std::atomic<int> calls_{0};
};

// `byte_size` bytes of a region at `offset` of its registered part, holding the region mapped.
// A value type.
struct RegionSpan {
  std::shared_ptr<const SharedRegion> region;
  char* data = nullptr;
  uint64_t byte_size = 0;
};

// The regions one call resolves tensors in, each counted once in its SharedRegion::calls()
// while the set lives (however many of the call's tensors it holds), and held mapped.
// Thread safety: not thread-safe (one call's; its handler, then its worker).
class CallRegions {
 public:
  CallRegions() = default;
  // Stops counting the call in each region.
  ~CallRegions();
  CallRegions(const CallRegions&) = delete;
  CallRegions& operator=(const CallRegions&) = delete;

  // Counts the call in `span`'s region unless it is counted already, and notes the bytes of the
  // registered part the call uses there (up to the span's end).
  void Add(const RegionSpan& span);
  // Stops counting the call in its regions now (the call is done with them, before it answers),
  // as the destructor would. Idempotent.
  void Release();
  // DataLoss naming the first region whose object shrank while the call used it: its mapping
  // was damaged (the call read zeros, its writes there are lost) or the object no longer holds
  // the bytes the call used (a GPU's copies into pinned pages the object let go of are lost
  // without a fault). OK otherwise. Called once the call is done with its regions.
  absl::Status CheckIntact() const;
  bool empty() const { return regions_.empty(); }

 private:
  struct Held {
    std::shared_ptr<const SharedRegion> region;
    uint64_t end = 0;  // of the bytes used, in the registered part
  };
  std::vector<Held> regions_;
};

// OK when a process with `peer`'s credentials could open a shared-memory object of owner
// `owner_uid`, group `group_gid` and `mode` for reading and writing, as the kernel judges it:
// root may; the owner by the owner's bits; a process whose gid is the object's by the group's
// bits (only the peer's primary gid is known, so supplementary groups do not count); anyone
// else by the others' bits. When the peer's uid is not known (a TCP peer that is not on
// loopback), only an object everyone may read and write passes. PermissionDenied saying which
// otherwise, for `what` (the region and key).
absl::Status CheckObjectAccess(uid_t owner_uid, gid_t group_gid, mode_t mode,
                               const PeerCredentials& peer, std::string_view what);

// Options of the registry. Every field has a default.
struct SharedMemoryOptions {
  bool system = true;                     // system regions may be registered
  bool cuda = true;                       // CUDA regions may be registered
  int64_t max_bytes = int64_t{16} << 30;  // registered bytes in all, at most
  int max_regions = 1024;                 // regions in all, at most
  int quota_regions = 256;                // regions of one owner, at most
  int64_t quota_bytes = 0;                // registered bytes of one owner; 0 = max_bytes only
  // Page-locked bytes of system regions (on servers with GPUs) in all, and of one owner
  // (0 = max_pinned_bytes only); past them a region stays unpinned.
  int64_t max_pinned_bytes = int64_t{4} << 30;
  int64_t quota_pinned_bytes = 0;
  std::string off_reason = "--shared-memory=off";  // said when system is false
  // Told of each registration an identity's own quota refuses: `quota` is "regions" or
  // "shared_memory_bytes". Called with the registry's lock held: it must not call back.
  std::function<void(const std::string& owner, const char* quota)> on_quota_refusal;
};

// Which regions a call of the registry means (KServe v2 keeps system and CUDA regions apart;
// kernelserve.v1 does not).
enum class RegionKind { kAny, kSystem, kCuda };

// Regions by owner and name. Every method takes the caller: registrations become the caller's,
// names resolve among the caller's regions, and `owner` (List, Unregister) is "" for the
// caller's own, or (admins only; PermissionDenied for others) another identity or kEveryOwner.
// Thread safety: thread-safe.
class SharedMemoryRegistry {
 public:
  // `gpu` (not owned, outliving the registry; nullptr = no GPUs) opens CUDA regions and pins
  // system ones.
  explicit SharedMemoryRegistry(SharedMemoryOptions options, GpuMemoryAccess* gpu = nullptr);

  // True when system regions may be registered.
  bool system() const { return options_.system; }
  // True when CUDA regions may be registered (on and a GPU to open them on).
  bool cuda() const { return options_.cuda && gpu_ != nullptr; }
  // Where CUDA regions' bytes are read from the host; nullptr without GPUs.
  GpuMemoryAccess* gpu() const { return gpu_; }
  // Page-locked bytes of system regions now.
  int64_t pinned_bytes() const { return pins_->bytes(); }

  // Maps and registers a system region of the caller's under `name`. Unimplemented when system
  // regions are off; PermissionDenied for an object the caller could not open for reading and
  // writing itself (CheckObjectAccess with caller.peer); InvalidArgument for a bad name
  // (CheckRegionName) or key (CheckObjectKey),
  // an empty size or a range past the object; NotFound for a key that does not exist;
  // AlreadyExists for a name the caller has taken; ResourceExhausted past a cap of the options
  // (naming it and its flag).
  absl::Status RegisterSystem(const Caller& caller, const std::string& name, const std::string& key,
                              uint64_t offset, uint64_t byte_size);
  // Opens and registers the GPU buffer that `raw_handle` (a cudaIpcMemHandle_t) exports, on
  // GPU `device`, as the caller's CUDA region `name`. Unimplemented when CUDA regions are off
  // or there is no GPU; errors as RegisterSystem otherwise (InvalidArgument for a handle that
  // does not open).
  absl::Status RegisterCuda(const Caller& caller, const std::string& name,
                            std::string_view raw_handle, int device, uint64_t byte_size);
  // Forgets `owner`'s region `name` ("" = every one of them) of `kind`; calls using it keep it
  // mapped until they end. NotFound for a name not registered as that kind.
  absl::Status Unregister(const Caller& caller, std::string_view owner, const std::string& name,
                          RegionKind kind = RegionKind::kAny);
  // `owner`'s regions of `kind` registered now, by owner and name (`name` alone when not "";
  // NotFound when it is not there as that kind).
  absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> List(
      const Caller& caller, std::string_view owner, const std::string& name,
      RegionKind kind = RegionKind::kAny) const;
  // [offset, offset + byte_size) of the caller's region `name`'s registered part, checked
  // against its object (SharedRegion::CheckObject). `what` names the tensor in errors:
  // NotFound for a region the caller has not registered, InvalidArgument for a range past its
  // end or its object's, FailedPrecondition for a damaged region.
  absl::StatusOr<RegionSpan> Span(const Caller& caller, const std::string& name, uint64_t offset,
                                  uint64_t byte_size, std::string_view what) const;

 private:
  // One owner's regions, by name.
  struct Owned {
    std::map<std::string, std::shared_ptr<const SharedRegion>> regions;
    int64_t bytes = 0;
  };

  // InvalidArgument for an empty size, AlreadyExists for a name `owner` has
  // taken, ResourceExhausted when one more region of `byte_size` bytes would pass a cap.
  absl::Status CheckNew(const std::string& owner, const std::string& name, uint64_t byte_size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckNew under the lock.
  absl::Status CheckNewLocking(const std::string& owner, const std::string& name,
                               uint64_t byte_size) const ABSL_LOCKS_EXCLUDED(mu_);
  // CheckNew again (another registration may have come in meanwhile), then adds `region`.
  absl::Status Insert(std::unique_ptr<SharedRegion> region) ABSL_LOCKS_EXCLUDED(mu_);

  const SharedMemoryOptions options_;
  GpuMemoryAccess* const gpu_;
  const std::shared_ptr<PinLedger> pins_;  // shared with the page locks of the regions
  mutable absl::Mutex mu_;
  std::map<std::string, Owned, std::less<>> owners_ ABSL_GUARDED_BY(mu_);  // none empty
  int regions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SHARED_MEMORY_H_
