#include "client/cli/cuda_loader.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace kernelserve::cli {

// The runtime's entry points (their C signatures; cudaError_t is an int, 0 = success).
struct GpuBuffer::Runtime {
  int (*set_device)(int) = nullptr;
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memcpy)(void*, const void*, size_t, int) = nullptr;  // kind 1 = host to device
  int (*ipc_get_mem_handle)(void*, void*) = nullptr;         // (cudaIpcMemHandle_t*, ptr)
  const char* (*error_string)(int) = nullptr;

  absl::Status Check(int error, const char* what) const {
    if (error == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": ", error_string(error)));
  }
};

namespace {

constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

template <typename Fn>
bool Find(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuBuffer>> GpuBuffer::Allocate(int device, size_t bytes) {
  // Loaded once; nullptr when none of the names loads.
  static const Runtime* const runtime = []() -> const Runtime* {
    for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
      void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) continue;
      auto* r = new Runtime;  // kept for the process's life
      if (Find(library, "cudaSetDevice", &r->set_device) &&
          Find(library, "cudaMalloc", &r->malloc) && Find(library, "cudaFree", &r->free) &&
          Find(library, "cudaMemcpy", &r->memcpy) &&
          Find(library, "cudaIpcGetMemHandle", &r->ipc_get_mem_handle) &&
          Find(library, "cudaGetErrorString", &r->error_string)) {
        return r;
      }
      delete r;
    }
    return nullptr;
  }();
  if (runtime == nullptr) {
    return absl::UnavailableError(
        "--shared-memory=cuda needs the CUDA runtime (libcudart.so.13, .12 or libcudart.so on "
        "the library path)");
  }
  void* buffer = nullptr;
  if (const int error = runtime->set_device(device); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("--shared-memory=cuda: GPU ", device, ": ", runtime->error_string(error)));
  }
  if (absl::Status s = runtime->Check(runtime->malloc(&buffer, bytes), "cudaMalloc"); !s.ok()) {
    return s;
  }
  return std::unique_ptr<GpuBuffer>(new GpuBuffer(runtime, device, buffer));
}

GpuBuffer::~GpuBuffer() {
  if (runtime_->set_device(device_) == 0) (void)runtime_->free(data_);
}

absl::Status GpuBuffer::CopyIn(size_t offset, const void* host, size_t bytes) const {
  constexpr int kHostToDevice = 1;
  return runtime_->Check(
      runtime_->memcpy(static_cast<char*>(data_) + offset, host, bytes, kHostToDevice),
      "cudaMemcpy");
}

absl::StatusOr<std::string> GpuBuffer::IpcHandle() const {
  std::string handle(kIpcHandleBytes, '\0');
  if (absl::Status s = runtime_->Check(runtime_->ipc_get_mem_handle(handle.data(), data_),
                                       "cudaIpcGetMemHandle");
      !s.ok()) {
    return s;
  }
  return handle;
}

}  // namespace kernelserve::cli
