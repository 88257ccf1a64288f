// The CUDA devices: the GPUs this process can use and their memory. No CUDA types here, so any
// part of the project may include it (in builds with CUDA; kernels/register.cc guards it with
// KERNELSERVE_WITH_CUDA).
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_PLATFORM_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_PLATFORM_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace kernelserve {

// One DeviceInfo per visible CUDA device, in ordinal order: platform kCuda, the ordinal, a
// fingerprint (kind "gpu", name, compute capability, SM count, memory, driver and runtime
// versions), total memory, the opt-in shared memory per block and the peak DRAM bandwidth. Empty
// when there is no driver, no GPU or any query fails; never fails hard. Thread-safe.
std::vector<DeviceInfo> EnumerateCudaDevices();

// Device memory of CUDA device `ordinal` as {used, total} bytes (used = total - free, as the
// driver reports it; memory cached in this process's pool counts as used).
// InvalidArgument for an ordinal that does not exist; Unavailable without a driver or GPU.
// Thread-safe.
absl::StatusOr<std::pair<int64_t, int64_t>> CudaMemoryInfo(int ordinal);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_PLATFORM_H_
