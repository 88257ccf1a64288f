// Argument checks and thread counts shared by the CPU kernels' platforms and launch functions.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_CHECKS_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// The most threads a CPU kernel's config may ask for (its named field "threads"; 0 = one per
// hardware thread). Kernels check their configs before anything is sized from them, start no more
// threads than the machine has or there are work items, and clamp tiles to the problem, so
// scratch memory stays proportional to the inputs.
inline constexpr int kMaxCpuThreads = 1024;

// The named config field of every CPU platform: worker threads.
inline constexpr char kCpuThreadsField[] = "threads";
// Its schema: 0..kMaxCpuThreads, 0 = one per hardware thread; it replaces num_warps.
ConfigFieldSchema CpuThreadsField();
// The worker threads `config` asks for (its "threads"; 0 = one per hardware thread).
// REQUIRES: the config passed its platform's check (the value is within 0..kMaxCpuThreads).
int RequestedThreads(const KernelConfig& config);
// Sets `config`'s worker threads (0 leaves the field out).
void SetRequestedThreads(KernelConfig* config, int threads);

// OK for a config of platform "" or "cpu"; InvalidArgument otherwise.
absl::Status CheckCpuPlatform(const KernelConfig& config);

// The hardware threads of `device` (its num_threads) within [1, kMaxCpuThreads]: the thread
// count the CPU platforms' heuristics and candidates name.
int HardwareThreads(const DeviceInfo& device);

// The threads a CPU kernel starts for `requested` (RequestedThreads) and `items` work items:
// never more than the items or the hardware threads, at least 1.
int CpuWorkerCount(int requested, int64_t items);

// OK when offsets[0..count] start at 0, never decrease and end at most at `total`.
// InvalidArgument naming `name` otherwise. REQUIRES: offsets holds count + 1 entries.
absl::Status CheckOffsets(const int64_t* offsets, int64_t count, int64_t total,
                          std::string_view name);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_CHECKS_H_
