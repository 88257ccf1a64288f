#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve {

// The mapping of the object; unmapped when the region and every view have let go.
// A CUDA region's "mapping" is the caller's buffer, left alone.
struct SharedMemoryRegion::Mapping {
  void* data = nullptr;
  size_t size = 0;
  bool mapped = true;  // by mmap here
  Mapping(void* d, size_t s, bool m) : data(d), size(s), mapped(m) {}
  ~Mapping() {
    if (mapped) munmap(data, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

namespace {

// A new shm_open key: "/kernelserve-<pid>-<n>-<name>", each '/', space or byte that is not
// printable ASCII in the name made '_', at most 255 bytes (NAME_MAX): a key the server takes
// whatever the name.
std::string NewKey(const std::string& name) {
  static std::atomic<uint64_t> next{0};
  std::string key = absl::StrCat("/kernelserve-", getpid(), "-", next.fetch_add(1), "-", name);
  for (size_t i = 1; i < key.size(); ++i) {
    if (key[i] == '/' || key[i] <= ' ' || key[i] > '~') key[i] = '_';
  }
  if (key.size() > 255) key.resize(255);
  return key;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Creates, sizes and maps object `key`; unlinks it again when that fails.
absl::StatusOr<void*> CreateAndMap(const std::string& key, uint64_t byte_size) {
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open '", key, "'"));
  void* data = MAP_FAILED;
  absl::Status status;
  if (ftruncate(fd, static_cast<off_t>(byte_size)) != 0) {
    status = Errno(absl::StrCat("ftruncate '", key, "' to ", byte_size, " bytes"));
  } else {
    data = mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) status = Errno(absl::StrCat("mmap '", key, "'"));
  }
  close(fd);
  if (!status.ok()) {
    shm_unlink(key.c_str());
    return status;
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::CreateSystem(
    const Client& client, std::string name, uint64_t byte_size) {
  if (name.empty()) return absl::InvalidArgumentError("shared memory: the region needs a name");
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region '", name, "': byte_size must be > 0"));
  }
  std::string object_key = NewKey(name);
  KS_ASSIGN_OR_RETURN(void* mapped, CreateAndMap(object_key, byte_size));
  auto mapping = std::make_shared<Mapping>(mapped, byte_size, /*mapped=*/true);
  if (absl::Status registered = client.RegisterSystemSharedMemory(name, object_key, 0, byte_size);
      !registered.ok()) {
    shm_unlink(object_key.c_str());
    return registered;
  }
  return std::unique_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(client, std::move(name), std::move(object_key), byte_size,
                             /*device=*/-1, std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::RegisterCuda(
    const Client& client, std::string name, const std::string& raw_handle, void* gpu_data,
    uint64_t byte_size, int device) {
  if (name.empty()) return absl::InvalidArgumentError("shared memory: the region needs a name");
  if (byte_size == 0 || gpu_data == nullptr || device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory region '", name, "': expected a GPU buffer, byte_size > 0, device >= 0"));
  }
  KS_RETURN_IF_ERROR(client.RegisterCudaSharedMemory(name, raw_handle, device, byte_size));
  auto mapping = std::make_shared<Mapping>(gpu_data, byte_size, /*mapped=*/false);
  return std::unique_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(client, std::move(name), "", byte_size, device, std::move(mapping)));
}

SharedMemoryRegion::SharedMemoryRegion(const Client& client, std::string name, std::string key,
                                       uint64_t byte_size, int device,
                                       std::shared_ptr<Mapping> mapping)
    : client_(client),
      name_(std::move(name)),
      key_(std::move(key)),
      byte_size_(byte_size),
      device_(device),
      mapping_(std::move(mapping)) {}

SharedMemoryRegion::~SharedMemoryRegion() {
  Unregister().IgnoreError();
  if (!key_.empty()) shm_unlink(key_.c_str());
}

absl::Status SharedMemoryRegion::Unregister() {
  absl::MutexLock lock(&mu_);
  if (!registered_) return absl::OkStatus();
  KS_RETURN_IF_ERROR(client_.UnregisterSharedMemory(name_));
  registered_ = false;
  return absl::OkStatus();
}

char* SharedMemoryRegion::data() const { return static_cast<char*>(mapping_->data); }

absl::StatusOr<Tensor> SharedMemoryRegion::View(uint64_t offset, DType dtype, Shape shape) const {
  KS_ASSIGN_OR_RETURN(const int64_t elements, NumElements(shape));
  uint64_t bytes = 0;
  uint64_t end = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements), ItemSize(dtype), &bytes) ||
      __builtin_add_overflow(offset, bytes, &end) || end > byte_size_) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region '", name_, "': ", bytes,
                                                   " bytes at offset ", offset, " are past its ",
                                                   byte_size_, " bytes"));
  }
  auto buffer = std::make_shared<HostBuffer>(
      data() + offset, bytes, /*pinned=*/false, [mapping = mapping_](void* /*data*/) {},
      /*view=*/true, device_);
  return Tensor::FromBuffer(dtype, std::move(shape), std::move(buffer));
}

absl::StatusOr<Tensor> SharedMemoryRegion::Put(uint64_t offset, const Tensor& tensor) const {
  if (device_ >= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory region '", name_, "' is GPU memory: copy into it with cudaMemcpy"));
  }
  KS_ASSIGN_OR_RETURN(Tensor view, View(offset, tensor.dtype(), tensor.shape()));
  if (tensor.nbytes() > 0) std::memmove(data() + offset, tensor.data(), tensor.nbytes());
  return view;
}

std::optional<v1::TensorRef> SharedMemoryRegion::RefOf(const Tensor& tensor) const {
  const auto begin = reinterpret_cast<uintptr_t>(tensor.data());
  const auto base = reinterpret_cast<uintptr_t>(data());
  if (tensor.data() == nullptr || begin < base || begin - base > byte_size_ ||
      tensor.nbytes() > byte_size_ - (begin - base)) {
    return std::nullopt;
  }
  v1::TensorRef ref;
  ref.set_region(name_);
  ref.set_offset(begin - base);
  ref.set_byte_size(tensor.nbytes());
  return ref;
}

}  // namespace kernelserve
