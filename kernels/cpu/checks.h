// Argument checks shared by the CPU kernels' launch functions.
#ifndef KERNELSERVE_KERNELS_CPU_CHECKS_H_
#define KERNELSERVE_KERNELS_CPU_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// Limits of the CPU kernels' configs, checked before anything is sized from a config. The
// kernels also start no more threads than the machine has or there are work items, and clamp
// tiles to the problem, so scratch memory stays proportional to the inputs.
inline constexpr int kMaxCpuThreads = 1024;        // num_warps (0 = one per hardware thread)
inline constexpr int kMaxCpuBlockRows = 1 << 20;   // mean pooling block_size (0 = chunk_size)
inline constexpr int kMaxCpuAttentionTile = 1024;  // attention block_q, block_k (0 = default)

// OK when `config` can drive the CPU mean pooling kernel: platform "" or "cpu", block_size and
// num_warps in range, the other fields 0. InvalidArgument naming the field and range otherwise.
absl::Status CheckMeanPoolingCpuConfig(const KernelConfig& config);
// The same for the CPU flash attention kernel: block_q, block_k and num_warps in range.
absl::Status CheckFlashAttentionCpuConfig(const KernelConfig& config);

// The threads a CPU kernel starts for `requested` (config num_warps) and `items` work items:
// never more than the items or the hardware threads, at least 1.
int CpuWorkerCount(int requested, int64_t items);

// OK when offsets[0..count] start at 0, never decrease and end at most at `total`.
// InvalidArgument naming `name` otherwise. REQUIRES: offsets holds count + 1 entries.
absl::Status CheckOffsets(const int64_t* offsets, int64_t count, int64_t total,
                          std::string_view name);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_CPU_CHECKS_H_
