// Devices a kernel can run on, and their fingerprints.
#ifndef KERNELSERVE_CORE_DEVICE_H_
#define KERNELSERVE_CORE_DEVICE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kernelserve {

enum class Platform { kCpu, kCuda, kCudnn };

// "cpu", "cuda", "cudnn".
std::string_view PlatformName(Platform platform);
// Inverse of PlatformName; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<Platform> ParsePlatform(std::string_view name);

// What identifies a device for config caching: two devices with equal fingerprints may share
// tuned configs. A value type.
struct DeviceFingerprint {
  std::string kind;  // "cpu" or "gpu"
  std::string name;  // "NVIDIA H100 80GB HBM3" or the CPU model string
  int cc_major = 0;  // compute capability (GPU)
  int cc_minor = 0;
  int sm_count = 0;          // multiprocessors (GPU) or hardware threads (CPU)
  int64_t memory_bytes = 0;  // global memory (GPU)
  int driver_version = 0;    // CUDA driver API version (GPU)
  int runtime_version = 0;   // CUDA runtime version (GPU)

  bool operator==(const DeviceFingerprint& other) const = default;
  // Stable JSON with sorted keys.
  std::string ToJson() const;
  // First 16 hex digits of SHA-256 of ToJson().
  std::string Hash() const;
};

// One device the process can run kernels on.
struct DeviceInfo {
  Platform platform = Platform::kCpu;  // kCpu or kCuda
  int ordinal = -1;                    // CUDA device ordinal; -1 for the CPU
  DeviceFingerprint fingerprint;
  int64_t memory_total_bytes = 0;
  int64_t shared_memory_per_block_optin = 0;  // bytes; 0 on the CPU
  // Peak DRAM bandwidth in bytes per second (GPU: 2 x memory clock x bus width); 0 unknown.
  double memory_bandwidth = 0.0;
  int num_threads = 1;  // CPU: hardware threads
};

// Something that keeps other work off a device while it lives, for work whose timing must be
// its own (see ExecutorOptions::hold_device). Thread safety: as a plain value.
class DeviceHold {
 public:
  virtual ~DeviceHold() = default;
};

// The CPU this process runs on (model string from /proc/cpuinfo, hardware threads).
DeviceInfo CpuDeviceInfo();

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_DEVICE_H_
