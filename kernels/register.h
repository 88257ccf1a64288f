// The kernels this build serves, and the GPUs it can use.
#ifndef KERNELSERVE_KERNELS_REGISTER_H_
#define KERNELSERVE_KERNELS_REGISTER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/host_pool.h"
#include "core/registry.h"

namespace kernelserve {

// Registers mean_pooling, mean_pooling_bwd, flash_attention and flash_attention_bwd with every
// platform implementation this build has (cpu always; cuda when built with CUDA; cudnn for the
// two flash attention kernels when built with cuDNN and it loads). REQUIRES: `registry`
// non-null, not yet holding them.
absl::Status RegisterBuiltinKernels(KernelRegistry* registry);

// The GPUs visible to this process (empty without CUDA, a driver or a GPU).
std::vector<DeviceInfo> DetectGpus();

// {used, total} bytes of GPU `ordinal`'s memory. InvalidArgument for a GPU that does not exist;
// Unavailable without CUDA or a driver.
absl::StatusOr<std::pair<int64_t, int64_t>> GpuMemoryInfo(int ordinal);

// The pool of page-locked host memory that the CUDA platform downloads outputs into, holding at
// most `limit_bytes`, for the server to parse request bytes into as well. Call once, before
// any GPU call. nullptr without CUDA, or when `limit_bytes` is 0 (the platform then stages
// every copy through its own small buffers).
HostBufferPool* ConfigureGpuHostMemory(size_t limit_bytes);

// True when this build includes the CUDA kernels.
bool BuiltWithCuda();

// The version of the cuDNN this process loaded ("9.19.0"), which the cudnn platform runs on;
// "none" when the build has no cudnn platform or cuDNN did not load.
std::string LoadedCudnnVersion();

// GPU runs whose inputs hold at least `min_bytes` bytes wait at a launch gate
// (cuda::SetLaunchGateMinBytes: 0 = every run, < 0 = none). Call it before the first GPU call.
// A no-op without CUDA.
void SetGpuLaunchGate(int64_t min_bytes);

// Why this process has no cudnn platform where its build has one (cuDNN did not load: the
// library's error); "" when it has one, or when the build has none.
std::string CudnnUnavailableReason();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_REGISTER_H_
