// cuDNN's plans as configs of the GPU platforms of flash_attention and flash_attention_bwd:
// whether cuDNN runs a problem on a device, its plans as candidates, and the check of a cudnn
// config. Built with or without the cudnn platform (without it, cuDNN runs nothing).
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDNN_PLANS_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDNN_PLANS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "core/kernel_config.h"
#include "core/status_macros.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"
#include "kernels/runtime/cudnn/cudnn_library.h"
#endif

namespace kernelserve::cudnn {

// The kernel's name in messages.
inline const char* LabelOf(const FlashAttentionProblem& /*p*/) { return "flash attention"; }
inline const char* LabelOf(const FlashAttentionBwdProblem& /*p*/) { return "flash_attention_bwd"; }

// OK when cuDNN runs the problem (P: FlashAttentionProblem or FlashAttentionBwdProblem) on
// `device`; otherwise why not: Unimplemented for what it does not run, the load or build
// failure's own status for the rest.
template <typename P>
absl::Status CudnnSupports(const P& p, const DeviceInfo& device) {
  KS_RETURN_IF_ERROR(CheckCudnnFlashRules(ForwardOf(p)));
#ifdef KERNELSERVE_WITH_CUDNN
  if (absl::StatusOr<int64_t> loaded = LoadCudnn(); !loaded.ok()) {
    return absl::UnimplementedError(loaded.status().message());
  }
  return CheckFlashGraph(p, device.ordinal);
#else
  (void)device;
  return absl::UnimplementedError(absl::StrCat(LabelOf(p), ": this build has no cudnn platform"));
#endif
}

// The number of cuDNN plans that built for the problem; CudnnSupports' status when cuDNN does
// not run it.
template <typename P>
absl::StatusOr<int> CudnnPlanCount(const P& p, const DeviceInfo& device) {
  KS_RETURN_IF_ERROR(CudnnSupports(p, device));
#ifdef KERNELSERVE_WITH_CUDNN
  return FlashPlanCount(p, device.ordinal);
#else
  return 0;
#endif
}

// The cudnn configs of the problem (cuDNN's plans that built), or none.
template <typename P>
std::vector<KernelConfig> CudnnCandidates(const P& p, const DeviceInfo& device) {
  std::vector<KernelConfig> configs;
  const int plans = CudnnPlanCount(p, device).value_or(0);
  for (int i = 0; i < plans; ++i) configs.push_back(CudnnFlashConfig(i));
  return configs;
}

// InvalidArgument unless `config` is a plan of the problem's cuDNN graph.
template <typename P>
absl::Status CheckCudnnConfig(const KernelConfig& config, const P& p, const DeviceInfo& device) {
  KS_ASSIGN_OR_RETURN(const int plan, CudnnFlashPlanIndex(config));
  const absl::StatusOr<int> plans = CudnnPlanCount(p, device);
  if (!plans.ok()) return absl::InvalidArgumentError(plans.status().message());
  if (plan >= *plans) {
    return absl::InvalidArgumentError(absl::StrCat(LabelOf(p), " (cudnn): plan ", plan,
                                                   " does not exist; this problem has ", *plans,
                                                   " plan(s)"));
  }
  return absl::OkStatus();
}

}  // namespace kernelserve::cudnn

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDNN_PLANS_H_
