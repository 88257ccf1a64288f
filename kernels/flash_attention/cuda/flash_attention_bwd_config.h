// The CUDA flash attention backward kernels' configs: which ones are compiled, the autotune
// space and the heuristic. Plain C++ (no CUDA types), built with or without CUDA so it is
// testable anywhere.
//
// Meaning of the KernelConfig fields for these kernels:
//   block_q     query rows per tile: the dQ kernel's block (block_q / 16 warps) and the query
//               tiles the dK/dV kernel streams.
//   block_k     key rows per tile: the dK/dV kernel's block (block_k / 16 warps) and the key
//               tiles the dQ kernel streams.
//   algorithm   "" for the mma.sync kernels (any sm_80+ GPU), "wgmma" for the Hopper kernel
//               (compute capability 9.0, compiled when the build targets sm_90a): one kernel
//               for dK, dV and dQ, a block of block_k = 128 keys (two consumer warpgroups)
//               streaming query tiles of block_q = 64 rows.
//   platform    "cuda" (or "" when given by hand); the other fields stay zero or empty.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CONFIG_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CONFIG_H_

#include <cstdint>
#include <vector>

#include "core/config_schema.h"
#include "core/device.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"

namespace kernelserve::cuda {

// True for the head dims with compiled backward kernels (64 and 128).
bool IsFlashBwdHeadDimCompiled(int64_t head_dim);

// The cuda platform's config schema: block_q and block_k within the bounds of the compiled
// instances, algorithm "" or "wgmma" (the compiled combinations are checked after it).
const ConfigSchema& FlashAttentionBwdCudaConfigSchema();

// Every compiled config of `head_dim` (empty when none), in a fixed order.
std::vector<KernelConfig> FlashAttentionBwdCompiledConfigs(int64_t head_dim);

// True when `config` is compiled for `head_dim` (fields as above, platform "cuda" or "").
bool IsFlashBwdConfigCompiled(const KernelConfig& config, int64_t head_dim);

// Shared memory the larger of the two kernels of `config` uses per block at `head_dim`.
int64_t FlashBwdConfigSharedBytes(const KernelConfig& config, int64_t head_dim);

// True when `config` is compiled for `head_dim` and both kernels' shared memory fits the
// device's opt-in limit (a device reporting 0 is taken as an H100's 227 KiB).
bool FlashBwdConfigFits(const KernelConfig& config, int64_t head_dim, const DeviceInfo& device);

// The autotune space: the compiled configs of the head dim that fit the device, the heuristic
// first. Empty for a problem the CUDA kernels cannot run (f32, another head dim).
std::vector<KernelConfig> FlashAttentionBwdCandidates(const FlashAttentionBwdProblem& problem,
                                                      const DeviceInfo& device);

// A pure function of problem and device; in FlashAttentionBwdCandidates(problem, device)
// whenever that is not empty. Hopper: the wgmma kernel. Elsewhere: query tiles of 64 rows; key
// tiles of 128 at D = 64 and 64 at D = 128, so that two blocks of each kernel share an SM at
// D = 128; on a device whose shared memory that exceeds, the compiled config with the least.
KernelConfig FlashAttentionBwdHeuristic(const FlashAttentionBwdProblem& problem,
                                        const DeviceInfo& device);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CONFIG_H_
