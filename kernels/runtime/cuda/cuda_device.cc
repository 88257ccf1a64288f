// EnumerateCudaDevices and CudaMemoryInfo.
#include <cuda_runtime_api.h>

#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve {
namespace {

absl::StatusOr<DeviceInfo> QueryDevice(int ordinal, int driver_version, int runtime_version) {
  cudaDeviceProp prop;
  KS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.platform = Platform::kCuda;
  info.ordinal = ordinal;
  info.fingerprint.kind = "gpu";
  info.fingerprint.name = prop.name;
  info.fingerprint.cc_major = prop.major;
  info.fingerprint.cc_minor = prop.minor;
  info.fingerprint.sm_count = prop.multiProcessorCount;
  info.fingerprint.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.fingerprint.driver_version = driver_version;
  info.fingerprint.runtime_version = runtime_version;
  info.memory_total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.shared_memory_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  // The peak DRAM bandwidth informs heuristics only: a device that does not report its memory
  // clock keeps 0 (unknown) rather than failing the enumeration.
  int memory_khz = 0;
  int bus_bits = 0;
  if (cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal) == cudaSuccess) {
    info.memory_bandwidth = 2.0 * memory_khz * 1e3 * bus_bits / 8.0;  // double data rate
  } else {
    (void)cudaGetLastError();
  }
  info.num_threads = 1;
  return info;
}

absl::StatusOr<std::vector<DeviceInfo>> QueryDevices() {
  int count = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  int driver_version = 0;
  int runtime_version = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver_version));
  KS_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime_version));
  std::vector<DeviceInfo> devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    absl::StatusOr<DeviceInfo> info = QueryDevice(ordinal, driver_version, runtime_version);
    if (!info.ok()) return info.status();
    devices.push_back(*std::move(info));
  }
  return devices;
}

}  // namespace

std::vector<DeviceInfo> EnumerateCudaDevices() {
  // No driver or no GPU is the normal case on a CPU machine: the answer is "none".
  absl::StatusOr<std::vector<DeviceInfo>> devices = QueryDevices();
  return devices.ok() ? *std::move(devices) : std::vector<DeviceInfo>{};
}

absl::StatusOr<std::pair<int64_t, int64_t>> CudaMemoryInfo(int ordinal) {
  int count = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError("CUDA device " + std::to_string(ordinal) +
                                      ": no such device (this process sees " +
                                      std::to_string(count) + ")");
  }
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::make_pair(static_cast<int64_t>(total_bytes - free_bytes),
                        static_cast<int64_t>(total_bytes));
}

}  // namespace kernelserve
