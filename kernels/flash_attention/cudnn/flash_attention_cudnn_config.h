// The cudnn platform of flash attention, as far as it is plain C++ (built with or without
// CUDA and cuDNN, so it is testable anywhere): what a cudnn config is, the contract's options
// cuDNN is not asked to run, and the measured rule between cuDNN and the own CUDA kernel.
//
// Meaning of the KernelConfig fields for a cudnn config (its schema: CudnnConfigSchema):
//   platform    "cudnn".
//   "plan"      (a named field) i: the i-th execution plan of cuDNN's heuristics (mode A) for
//               the problem's graph, 0 = cuDNN's first choice. Indices depend on the cuDNN
//               version; an index past the plans a graph has is refused (and a stored one is
//               a cache miss). Before config schema 2 this was algorithm "plan<i>".
//   every other field stays zero or empty.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_CONFIG_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_CONFIG_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve::cudnn {

// KernelConfig::platform of a cudnn config.
inline constexpr std::string_view kCudnnPlatform = "cudnn";

// At most this many of cuDNN's plans (in its heuristics' order) are tuning candidates.
inline constexpr int kMaxFlashPlans = 4;

// The named config field of the plan index.
inline constexpr char kCudnnPlanField[] = "plan";
// The most plan index a config may name.
inline constexpr int kMaxCudnnPlanIndex = 1023;

// The cudnn platform's config schema: "plan" only.
const ConfigSchema& CudnnConfigSchema();

// True when `config` names the cudnn platform.
bool IsCudnnConfig(const KernelConfig& config);

// The config of plan `plan_index` (platform "cudnn", "plan" plan_index).
KernelConfig CudnnFlashConfig(int plan_index);

// The plan index of a cudnn config; InvalidArgument naming the field when `config` is not one
// (another platform, a field other than "plan": CudnnConfigSchema's check).
absl::StatusOr<int> CudnnFlashPlanIndex(const KernelConfig& config);

// OK when the problem is one this service asks cuDNN's SDPA to run, before any graph is built;
// Unimplemented naming the first option it is not asked for: f32 (cuDNN takes f16 and bf16),
// a head dim that is not a multiple of 8 or exceeds 256, segment ids, a logits soft cap,
// varlen, more than 2^31 elements in a tensor. What passes may still be refused by the
// graph's own support check on the device.
absl::Status CheckCudnnFlashRules(const FlashAttentionProblem& problem);

// The measured rule, without tuning, when both the own CUDA kernel and cuDNN run a forward
// problem: true = cuDNN's first plan. On Hopper (compute capability 9.x) cuDNN's kernel was
// faster at every measured head dim (docs/PERFORMANCE_LOG.md, 2026-11-23: the own kernel at
// 0.65-0.73x of it at D=128, 0.48-0.50x at D=256, 0.83-0.88x at D=32; 2026-11-29: 0.88-1.02x
// with the warp-specialized kernels), except with a bias: the own kernels read it by TMA tiles
// and ran 1.34-1.47x cuDNN's best plan (2026-11-29, H200, [4,4096] D=128 with a [1,1,S,S]
// f32 bias). Elsewhere the own kernels stay first until measured.
bool PreferCudnn(const FlashAttentionProblem& problem, const DeviceInfo& device);

// The same rule for the backward of `forward`: cuDNN's first plan on Hopper, bias or not
// (2026-11-26: flash_attention_bwd's own kernels at 0.3-0.5x of cuDNN's first plan, D=64 and
// 128).
bool PreferCudnnBackward(const FlashAttentionProblem& forward, const DeviceInfo& device);

}  // namespace kernelserve::cudnn

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_CONFIG_H_
