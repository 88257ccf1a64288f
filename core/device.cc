#include "core/device.h"

#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/invocation.h"
#include "core/utils/string_view.h"
#include "nlohmann/json.hpp"

namespace kernelserve {
namespace {

// The "model name" line of /proc/cpuinfo, or "unknown-cpu".
std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (!name.empty()) return name;
  }
  return "unknown-cpu";
}

}  // namespace

std::string_view PlatformName(Platform platform) {
  switch (platform) {
    case Platform::kCpu:
      return "cpu";
    case Platform::kCuda:
      return "cuda";
    case Platform::kCudnn:
      return "cudnn";
  }
  return "unknown";
}

absl::StatusOr<Platform> ParsePlatform(std::string_view name) {
  for (Platform platform : {Platform::kCpu, Platform::kCuda, Platform::kCudnn}) {
    if (PlatformName(platform) == name) return platform;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown platform '", Sv(name), "'; expected one of cpu, cuda, cudnn"));
}

std::string DeviceFingerprint::ToJson() const {
  nlohmann::json json = nlohmann::json::object();  // keys sorted by std::map
  json["kind"] = kind;
  json["name"] = name;
  json["cc_major"] = cc_major;
  json["cc_minor"] = cc_minor;
  json["sm_count"] = sm_count;
  json["memory_bytes"] = memory_bytes;
  json["driver_version"] = driver_version;
  json["runtime_version"] = runtime_version;
  // Replace rather than throw on invalid UTF-8 in a device name.
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string DeviceFingerprint::Hash() const {
  // Hashed again and again for the same device: remember the last one on this thread.
  thread_local DeviceFingerprint last;
  thread_local std::string last_hash;
  if (last_hash.empty() || !(last == *this)) {
    last_hash = ShortSha256(ToJson());
    last = *this;
  }
  return last_hash;
}

DeviceInfo CpuDeviceInfo() {
  DeviceInfo info;
  info.platform = Platform::kCpu;
  info.ordinal = -1;
  const unsigned threads = std::thread::hardware_concurrency();
  info.num_threads = threads == 0 ? 1 : static_cast<int>(threads);
  info.fingerprint.kind = "cpu";
  info.fingerprint.name = CpuModelName();
  info.fingerprint.sm_count = info.num_threads;
  return info;
}

}  // namespace kernelserve
