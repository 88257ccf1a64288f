#include "kernels/runtime/cpu/checks.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::cpu {

absl::Status CheckCpuPlatform(const KernelConfig& config) {
  if (!config.platform.empty() && config.platform != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("config platform '", config.platform, "': expected \"cpu\" or \"\""));
  }
  return absl::OkStatus();
}

ConfigFieldSchema CpuThreadsField() {
  return IntConfigField(kCpuThreadsField, 0, kMaxCpuThreads, "0: one per hardware thread",
                        "the cpu platform's worker threads", /*replaces=*/"num_warps");
}

int RequestedThreads(const KernelConfig& config) {
  return static_cast<int>(std::clamp<int64_t>(config.Named(kCpuThreadsField), 0, kMaxCpuThreads));
}

void SetRequestedThreads(KernelConfig* config, int threads) {
  if (threads == 0) {
    config->named.erase(kCpuThreadsField);
  } else {
    config->named[kCpuThreadsField] = threads;
  }
}

int HardwareThreads(const DeviceInfo& device) {
  return std::clamp(device.num_threads, 1, kMaxCpuThreads);
}

int CpuWorkerCount(int requested, int64_t items) {
  // Read once: glibc answers hardware_concurrency from /sys, microseconds a call.
  static const unsigned hardware = std::thread::hardware_concurrency();
  int64_t workers = requested > 0 ? requested : std::max<int64_t>(hardware, 1);
  if (hardware > 0) workers = std::min<int64_t>(workers, hardware);
  return static_cast<int>(std::max<int64_t>(1, std::min(workers, items)));
}

absl::Status CheckOffsets(const int64_t* offsets, int64_t count, int64_t total,
                          std::string_view name) {
  if (offsets[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(name), "[0] = ", offsets[0], ": expected 0"));
  }
  for (int64_t n = 0; n < count; ++n) {
    if (offsets[n + 1] < offsets[n]) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(name), " decreases at index ", n + 1, " (",
                                                     offsets[n], " then ", offsets[n + 1], ")"));
    }
  }
  if (offsets[count] > total) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(name), " ends at ", offsets[count], ": expected at most ", total, " rows"));
  }
  return absl::OkStatus();
}

}  // namespace kernelserve::cpu
