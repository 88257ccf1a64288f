// The GPU platforms of flash_attention and of flash_attention_bwd, one template for both: the
// cuda platform runs the own kernels' configs and cuDNN's plans (candidates of both, the
// heuristic by the measured rule cudnn::PreferCudnn), the cudnn platform cuDNN's plans alone;
// both on one kind of prepared run.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_GPU_IMPL_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_GPU_IMPL_H_

#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/kernel.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_cudnn_plans.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_resources.h"

namespace kernelserve::cuda {

// Traits name what differs between the kernels:
//   using ProblemType = ...;  // FlashAttentionProblem or FlashAttentionBwdProblem
//   using Run = ...;          // Run(const ProblemType&, const DeviceInfo&,
//                             //     DeviceThreadResources*), absl::Status Init(const TensorMap&)
//   static constexpr const char* kLabel;  // the kernel in messages
//   static absl::Status OwnSupports(const ProblemType&);  // Unimplemented: what the own lack
//   static KernelConfig OwnHeuristic(const ProblemType&, const DeviceInfo&);
//   static std::vector<KernelConfig> OwnCandidates(const ProblemType&, const DeviceInfo&);
//   static absl::Status CheckOwnConfig(const KernelConfig&, const ProblemType&,
//                                      const DeviceInfo&);  // InvalidArgument
// Thread safety: stateless; every method may run on many threads at once.
template <typename Traits>
class FlashGpuImpl final : public PlatformImpl {
 public:
  using P = typename Traits::ProblemType;

  // only_cudnn: the cudnn platform (cuDNN's plans alone); else the cuda platform.
  explicit FlashGpuImpl(bool only_cudnn) : only_cudnn_(only_cudnn) {}

  Platform platform() const override { return only_cudnn_ ? Platform::kCudnn : Platform::kCuda; }

  bool RunsConfigsOf(std::string_view config_platform) const override {
    return PlatformImpl::RunsConfigsOf(config_platform) ||
           (!only_cudnn_ && config_platform == cudnn::kCudnnPlatform);
  }

  absl::Status Supports(const Problem& problem, const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda) {
      return absl::UnimplementedError(absl::StrCat(
          Traits::kLabel, " (", Sv(PlatformName(platform())), "): the device is not a CUDA GPU"));
    }
    const P& p = ProblemAs<P>(problem);
    if (only_cudnn_) return cudnn::CudnnSupports(p, device);
    absl::Status own = Traits::OwnSupports(p);
    if (own.ok() || cudnn::CudnnSupports(p, device).ok()) return absl::OkStatus();
    return own;
  }

  // The own kernels' heuristic unless cuDNN runs the problem and either the own kernels do not
  // or the measured rule (cudnn::PreferCudnn) picks cuDNN: then cuDNN's first plan.
  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    const bool own = !only_cudnn_ && Traits::OwnSupports(p).ok();
    if (own && !cudnn::PreferCudnn(ForwardOf(p), device)) {
      return Traits::OwnHeuristic(p, device);
    }
    if (cudnn::CudnnSupports(p, device).ok()) return cudnn::CudnnFlashConfig(0);
    return Traits::OwnHeuristic(p, device);
  }

  // The heuristic first, then the own kernels' configs, then cuDNN's plans.
  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    std::vector<KernelConfig> all = {Heuristic(problem, device)};
    auto add = [&all](const std::vector<KernelConfig>& configs) {
      for (const KernelConfig& c : configs) {
        if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
      }
    };
    if (!only_cudnn_ && Traits::OwnSupports(p).ok()) add(Traits::OwnCandidates(p, device));
    add(cudnn::CudnnCandidates(p, device));
    return all;
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                           const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    if (cudnn::IsCudnnConfig(config) || only_cudnn_) {
      return cudnn::CheckCudnnConfig(config, p, device);
    }
    KS_RETURN_IF_ERROR(Traits::OwnSupports(p));
    return Traits::CheckOwnConfig(config, p, device);
  }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda || device.ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Traits::kLabel, " (", Sv(PlatformName(platform())), "): expected a CUDA device, got ",
          Sv(PlatformName(device.platform)), " ordinal ", device.ordinal));
    }
    KS_RETURN_IF_ERROR(Supports(problem, device));
    KS_ASSIGN_OR_RETURN(DeviceThreadResources * resources, ThisThreadResources(device.ordinal));
    auto run = std::make_unique<typename Traits::Run>(ProblemAs<P>(problem), device, resources);
    KS_RETURN_IF_ERROR(run->Init(inputs));
    return std::unique_ptr<PreparedRun>(std::move(run));
  }

 private:
  const bool only_cudnn_;
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_GPU_IMPL_H_
