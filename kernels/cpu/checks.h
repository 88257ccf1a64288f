// Argument checks shared by the CPU kernels' launch functions.
#ifndef KERNELSERVE_KERNELS_CPU_CHECKS_H_
#define KERNELSERVE_KERNELS_CPU_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// OK when `config` can drive a CPU kernel: platform "" or "cpu", no negative field.
// InvalidArgument naming the offending field otherwise.
absl::Status CheckCpuConfig(const KernelConfig& config);

// OK when offsets[0..count] start at 0, never decrease and end at most at `total`.
// InvalidArgument naming `name` otherwise. REQUIRES: offsets holds count + 1 entries.
absl::Status CheckOffsets(const int64_t* offsets, int64_t count, int64_t total,
                          std::string_view name);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_CPU_CHECKS_H_
