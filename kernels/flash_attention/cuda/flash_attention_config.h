// The CUDA flash attention kernel's configs: which ones are compiled, the autotune space and the
// heuristic. Plain C++ (no CUDA types), built with or without CUDA so it is testable anywhere.
//
// Meaning of the KernelConfig fields for this kernel:
//   block_q     query rows per block, 16 per warp (64 with 4 warps, 128 with 8).
//   block_k     key rows per K/V tile streamed through shared memory.
//   num_warps   warps per block.
//   num_stages  K/V tiles in flight (shared-memory stages).
//   algorithm   "" for the mma.sync kernel (any sm_80+ GPU), "wgmma" for the Hopper kernel
//               (compute capability 9.0, compiled when the build targets sm_90a; 64 query
//               rows per warpgroup of 4 warps), "wgmma_ws" / "wgmma_pp" for the
//               warp-specialized Hopper kernel (num_warps counts its producer warpgroup too).
//   platform    "cuda" (or "" when given by hand); the other fields stay zero or empty.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CONFIG_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CONFIG_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/config_schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve::cuda {

// KernelConfig::algorithm of the Hopper (wgmma) kernel.
inline constexpr std::string_view kFlashWgmmaAlgorithm = "wgmma";
// KernelConfig::algorithm of the warp-specialized Hopper kernel (a TMA producer warpgroup and
// two consumer warpgroups), and of the same with the consumers taking turns (ping-pong).
inline constexpr std::string_view kFlashWsAlgorithm = "wgmma_ws";
inline constexpr std::string_view kFlashWsPingPongAlgorithm = "wgmma_pp";

// The forward kernels, one per KernelConfig::algorithm (the launcher of each is
// LaunchFlashAttention<Mma|Wgmma|Ws|WsPp>, flash_attention_launch.h).
enum class FlashAlgorithm { kMma = 0, kWgmma = 1, kWs = 2, kWsPp = 3 };

// KernelConfig::algorithm of `algorithm` ("" for kMma).
std::string_view FlashAlgorithmName(FlashAlgorithm algorithm);

// Sets *algorithm to the kernel `name` names; false (and *algorithm untouched) for a name no
// kernel has.
bool FlashAlgorithmNamed(std::string_view name, FlashAlgorithm* algorithm);

// The cuda platform's config schema: block_q, block_k, num_warps and num_stages within the
// bounds of the compiled instances, algorithm "", "wgmma", "wgmma_ws" or "wgmma_pp" (the
// compiled combinations are checked after it).
const ConfigSchema& FlashAttentionCudaConfigSchema();

// True where the wgmma kernels (forward and backward) run: Hopper, compute capability 9.0. A
// device without a known capability (0.0) is not assumed to.
bool IsFlashWgmmaDevice(const DeviceInfo& device);

// True for the head dims with compiled kernels (32, 64, 96, 128 and 256).
bool IsFlashHeadDimCompiled(int64_t head_dim);

// Every compiled config of `head_dim` (empty when none), in a fixed order.
std::vector<KernelConfig> FlashAttentionCompiledConfigs(int64_t head_dim);

// True when `config` is compiled for `head_dim` (fields as above, platform "cuda" or "").
bool IsFlashConfigCompiled(const KernelConfig& config, int64_t head_dim);

// Shared memory a block of `config` uses at `head_dim` (2-byte elements).
int64_t FlashConfigSharedBytes(const KernelConfig& config, int64_t head_dim);

// True when `config` is compiled for the problem's head dim, its shared memory fits the
// device's opt-in limit (a device reporting 0 is taken as an H100's 227 KiB), and, for a wgmma
// config, the device is a Hopper GPU (compute capability 9.0).
bool FlashConfigFits(const KernelConfig& config, int64_t head_dim, const DeviceInfo& device);

// The autotune space: the compiled configs of the head dim that fit the device, the heuristic
// first. Empty for a problem the CUDA kernel cannot run (f32, another head dim).
std::vector<KernelConfig> FlashAttentionCandidates(const FlashAttentionProblem& problem,
                                                   const DeviceInfo& device);

// A pure function of problem and device; in FlashAttentionCandidates(problem, device) whenever
// that is not empty.
// Hopper with wgmma compiled: the warp-specialized kernel ("wgmma_ws" for dense calls from
// D = 96, "wgmma_pp" with its consumers taking turns at D = 64 and for varlen), 12 warps x 128
// query rows, key tiles of 128 (64 at D = 256) and 2 stages; at D = 32 mma.sync as below.
// Otherwise mma.sync with 4 warps x 64 query rows, key tiles of 128 up to D = 64, 64 up to
// D = 128 and 32 at D = 256, 2 stages; on a device whose shared memory that exceeds, the
// largest compiled config that fits.
KernelConfig FlashAttentionHeuristic(const FlashAttentionProblem& problem,
                                     const DeviceInfo& device);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CONFIG_H_
