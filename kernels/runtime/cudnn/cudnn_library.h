// cuDNN, loaded at run time: the cudnn platform exists in a process only where libcudnn (9.x)
// can be loaded. Nothing here links against cuDNN; the cudnn-frontend headers reach the
// library through the handle LoadCudnn opens (their dynamic-loading mode).
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDNN_CUDNN_LIBRARY_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDNN_CUDNN_LIBRARY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

struct cudnnContext;

namespace kernelserve::cudnn {

// A cuDNN handle (cudnnHandle_t).
using Handle = cudnnContext*;

// Loads libcudnn once per process: the file named by the environment variable
// KERNELSERVE_CUDNN_LIBRARY when set, else libcudnn.so.9 as the dynamic loader finds it
// (LD_LIBRARY_PATH, the loader's cache). Returns cuDNN's version as cudnnGetVersion reports
// it (91900 for 9.19.0). Unavailable with the loader's message when the library is absent, or
// when it is not cuDNN 9. The first call also tells cudnn-frontend which CUDA runtime the
// process uses, so it takes that one; make it before other threads start (the kernel
// registration does). Thread-safe; later calls return the first one's answer.
absl::StatusOr<int64_t> LoadCudnn();

// "9.19.0" for 91900.
std::string CudnnVersionName(int64_t version);

// The calling thread's cuDNN handle on device `ordinal`, made on first use (with `ordinal` the
// thread's current device) and destroyed when the thread exits. The handle's stream is the
// caller's to set before each use. REQUIRES: LoadCudnn().ok().
absl::StatusOr<Handle> ThisThreadHandle(int ordinal);

}  // namespace kernelserve::cudnn

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDNN_CUDNN_LIBRARY_H_
