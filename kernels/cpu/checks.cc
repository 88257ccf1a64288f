#include "kernels/cpu/checks.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::cpu {

absl::Status CheckCpuConfig(const KernelConfig& config) {
  if (!config.platform.empty() && config.platform != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("config platform '", config.platform, "': expected \"cpu\" or \"\""));
  }
  const std::pair<const char*, int> fields[] = {
      {"block_q", config.block_q},       {"block_k", config.block_k},
      {"block_d", config.block_d},       {"num_warps", config.num_warps},
      {"num_stages", config.num_stages}, {"block_size", config.block_size}};
  for (const auto& [name, value] : fields) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config ", name, "=", value, ": expected >= 0"));
    }
  }
  return absl::OkStatus();
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
