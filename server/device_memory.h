// Memory use of the devices the server runs on, for GetServerInfo and the metrics.
#ifndef KERNELSERVE_SERVER_DEVICE_MEMORY_H_
#define KERNELSERVE_SERVER_DEVICE_MEMORY_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace kernelserve::server {

// A value type.
struct DeviceMemory {
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};

// Device -1: host memory (MemTotal - MemAvailable of /proc/meminfo). A GPU ordinal: the
// driver's free/total (CUDA builds; makes the ordinal the calling thread's current device);
// Unavailable without CUDA or on a driver error. Thread-safe.
absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_DEVICE_MEMORY_H_
