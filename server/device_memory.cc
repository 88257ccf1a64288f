#include "server/device_memory.h"

#include <fstream>
#include <string>

#include "kernels/register.h"

namespace kernelserve::server {
namespace {

absl::StatusOr<DeviceMemory> HostMemory() {
  std::ifstream meminfo("/proc/meminfo");
  if (!meminfo) return absl::UnavailableError("cannot read /proc/meminfo");
  int64_t total_kb = -1;
  int64_t available_kb = -1;
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemTotal:") total_kb = value;
    if (key == "MemAvailable:") available_kb = value;
  }
  if (total_kb < 0 || available_kb < 0) {
    return absl::UnavailableError("/proc/meminfo lacks MemTotal or MemAvailable");
  }
  return DeviceMemory{(total_kb - available_kb) * 1024, total_kb * 1024};
}

}  // namespace

absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device) {
  if (device < 0) return HostMemory();
  absl::StatusOr<std::pair<int64_t, int64_t>> used_total = GpuMemoryInfo(device);
  if (!used_total.ok()) return used_total.status();
  return DeviceMemory{used_total->first, used_total->second};
}

}  // namespace kernelserve::server
