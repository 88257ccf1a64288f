// SharedMemoryRegion: a POSIX shared-memory object this process creates, maps and registers
// with a server on the same host, so that calls name tensors in it instead of sending their
// bytes (kernelserve.v1's Tensor.ref and output_regions).
//
//   KS_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemoryRegion> region,
//                       SharedMemoryRegion::CreateSystem(*client, "tensors", 64 << 20));
//   KS_ASSIGN_OR_RETURN(Tensor x, region->Put(0, host_x));       // x's bytes, once
//   KS_ASSIGN_OR_RETURN(Tensor out, region->View(32 << 20, DType::kF32, {8, 1024}));
//   MeanPoolingOptions options;
//   options.run.regions = {region.get()};  // inputs in it go as references
//   options.run.outputs["out"] = out;      // the server writes "out" there
//   KS_ASSIGN_OR_RETURN(RunResult r, client->MeanPooling(x, options));  // r.outputs["out"]
//                                                                       // views the region
#ifndef KERNELSERVE_CLIENT_SHARED_MEMORY_H_
#define KERNELSERVE_CLIENT_SHARED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve {

// Thread safety: thread-safe; the bytes of the region are the caller's to synchronize with the
// calls that read or write them (a call's inputs must not change until it returns).
class SharedMemoryRegion {
 public:
  // Creates a shared-memory object of `byte_size` bytes (its key "/kernelserve-<pid>-<n>-<name>",
  // each '/', space or byte outside printable ASCII in the name made '_', cut to 255 bytes), maps
  // it and registers all of it with the server of `client` under `name`, a region of the
  // client's identity. InvalidArgument for an empty name or size; Internal when the object
  // cannot be made or mapped; the server's error when it refuses (InvalidArgument: a name not of
  // 1 to 128 printable ASCII characters without spaces; Unimplemented: shared memory is off
  // there; AlreadyExists: the identity has taken the name; ResourceExhausted: past the server's
  // caps; NotFound: the server is on another host and cannot see the object).
  // REQUIRES: `client` outlives the region.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> CreateSystem(const Client& client,
                                                                          std::string name,
                                                                          uint64_t byte_size);
  // Registers the caller's GPU buffer as CUDA region `name`: the `byte_size` bytes at
  // `gpu_data` (this process's address of a cudaMalloc allocation's start, on the server's GPU
  // `device`), whose cudaIpcMemHandle_t the caller got from cudaIpcGetMemHandle(gpu_data) and
  // passes in `raw_handle`. Calls on that GPU read and write the buffer in place. Its views are
  // GPU tensors (Tensor::device() == device; their bytes cannot be read here, and Put refuses:
  // copy with cudaMemcpy). The buffer stays the caller's: destroying the region unregisters it
  // only. Errors as CreateSystem (the server's InvalidArgument for a handle it cannot open).
  // REQUIRES: `client` outlives the region, the buffer outlives its registration.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> RegisterCuda(
      const Client& client, std::string name, const std::string& raw_handle, void* gpu_data,
      uint64_t byte_size, int device);
  // Unregisters (unless Unregister ran; errors are dropped) and unlinks a system region's
  // object. Tensors that view a system region keep its mapping alive.
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  // Unregisters the region from the server now, returning its answer. Idempotent.
  absl::Status Unregister();

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }  // "" for a CUDA region
  uint64_t byte_size() const { return byte_size_; }
  // The GPU of a CUDA region; -1 for a system region.
  int device() const { return device_; }
  // The region's first byte, in this process (a GPU address for a CUDA region).
  char* data() const;

  // A tensor of `dtype` and `shape` whose bytes are the region's at `offset` (written through
  // data(), read by the server in place when 16-byte aligned). InvalidArgument when they do
  // not fit.
  absl::StatusOr<Tensor> View(uint64_t offset, DType dtype, Shape shape) const;
  // Copies `tensor`'s bytes to `offset` of a system region and returns the view of them;
  // FailedPrecondition for a CUDA region.
  absl::StatusOr<Tensor> Put(uint64_t offset, const Tensor& tensor) const;
  // Where `tensor`'s bytes lie in this region; nullopt when they are not all in it.
  std::optional<v1::TensorRef> RefOf(const Tensor& tensor) const;

 private:
  struct Mapping;
  SharedMemoryRegion(const Client& client, std::string name, std::string key, uint64_t byte_size,
                     int device, std::shared_ptr<Mapping> mapping);

  const Client& client_;
  const std::string name_;
  const std::string key_;
  const uint64_t byte_size_;
  const int device_;                        // -1: a system region
  const std::shared_ptr<Mapping> mapping_;  // shared with the views
  absl::Mutex mu_;
  bool registered_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_SHARED_MEMORY_H_
