#include "kernels/runtime/cudnn/cudnn_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/runtime/cuda/cuda_check.h"

// cudnn-frontend's dynamic-loading mode reaches cuDNN through this handle (it declares it;
// the program defines it once).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace kernelserve::cudnn {
namespace {

using GetVersionFn = size_t (*)();
using CreateFn = int (*)(Handle*);
using DestroyFn = int (*)(Handle);

struct Library {
  absl::StatusOr<int64_t> version = absl::UnavailableError("not loaded");
  CreateFn create = nullptr;
  DestroyFn destroy = nullptr;
};

Library Open() {
  Library lib;
  const char* named = std::getenv("KERNELSERVE_CUDNN_LIBRARY");
  const std::string file = named != nullptr && *named != '\0' ? named : "libcudnn.so.9";
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    lib.version = absl::UnavailableError(
        absl::StrCat("cuDNN is not loadable (", file, ": ", why != nullptr ? why : "not found",
                     "); set KERNELSERVE_CUDNN_LIBRARY or LD_LIBRARY_PATH to use it"));
    return lib;
  }
  auto get_version = reinterpret_cast<GetVersionFn>(dlsym(handle, "cudnnGetVersion"));
  lib.create = reinterpret_cast<CreateFn>(dlsym(handle, "cudnnCreate"));
  lib.destroy = reinterpret_cast<DestroyFn>(dlsym(handle, "cudnnDestroy"));
  if (get_version == nullptr || lib.create == nullptr || lib.destroy == nullptr) {
    lib.version = absl::UnavailableError(
        absl::StrCat(file, " lacks cudnnGetVersion, cudnnCreate or cudnnDestroy: not cuDNN"));
    return lib;
  }
  const auto version = static_cast<int64_t>(get_version());
  if (version / 10000 != 9) {
    lib.version = absl::UnavailableError(absl::StrCat(file, " is cuDNN ", CudnnVersionName(version),
                                                      "; the cudnn platform needs cuDNN 9"));
    return lib;
  }
  // cudnn-frontend loads "the" CUDA runtime by name and, where several majors are installed,
  // may pick another one than the process's; name the one this build uses (not overriding a
  // choice made in the environment).
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME",
         absl::StrCat("libcudart.so.", CUDART_VERSION / 1000).c_str(),
         /*overwrite=*/0);
  cudnn_frontend::cudnn_dlhandle = handle;
  lib.version = version;
  return lib;
}

const Library& TheLibrary() {
  static const Library* const lib = new Library(Open());
  return *lib;
}

// The calling thread's handles, by device; destroyed with the thread.
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (const auto& [ordinal, handle] : handles_) TheLibrary().destroy(handle);
  }
  std::map<int, Handle>& handles() { return handles_; }

 private:
  std::map<int, Handle> handles_;
};

}  // namespace

absl::StatusOr<int64_t> LoadCudnn() { return TheLibrary().version; }

std::string CudnnVersionName(int64_t version) {
  return absl::StrCat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

absl::StatusOr<Handle> ThisThreadHandle(int ordinal) {
  const Library& lib = TheLibrary();
  if (!lib.version.ok()) return lib.version.status();
  thread_local ThreadHandles mine;
  auto it = mine.handles().find(ordinal);
  if (it != mine.handles().end()) return it->second;
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  Handle handle = nullptr;
  const int created = lib.create(&handle);
  if (created != 0 || handle == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cudnnCreate on device ", ordinal, " failed with cuDNN status ", created));
  }
  mine.handles().emplace(ordinal, handle);
  return handle;
}

}  // namespace kernelserve::cudnn
