// The GPU implementations of flash_attention and of flash_attention_bwd, one template for
// both: the cuda platform runs the own kernels alone, the cudnn platform cuDNN's plans alone,
// and the kernel's GPU "auto" (Kernel::SetGpuAutoImpl) picks among both (candidates of both,
// the heuristic by the measured rule, cudnn::PreferCudnn or PreferCudnnBackward); all on one
// kind of prepared run.
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
#include "kernels/flash_attention/cuda/flash_attention_cudnn_plans.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_impl.h"

namespace kernelserve::cuda {

// Traits name what differs between the kernels:
//   using ProblemType = ...;  // FlashAttentionProblem or FlashAttentionBwdProblem
//   using Run = ...;          // Run(const ProblemType&, const DeviceInfo&,
//                             //     DeviceThreadResources*), absl::Status Init(const TensorMap&)
//   static constexpr const char* kLabel;  // the kernel in messages
//   static absl::Status OwnSupports(const ProblemType&);  // Unimplemented: what the own lack
//   static KernelConfig OwnHeuristic(const ProblemType&, const DeviceInfo&);
//   static bool PreferCudnn(const ProblemType&, const DeviceInfo&);  // the measured rule
//   static std::vector<KernelConfig> OwnCandidates(const ProblemType&, const DeviceInfo&);
//   static const ConfigSchema& OwnConfigFields();  // the own kernels' config schema
//   static absl::Status CheckOwnConfig(const KernelConfig&, const ProblemType&,
//                                      const DeviceInfo&);  // InvalidArgument
// Thread safety: stateless; every method may run on many threads at once.
// Which configs a FlashGpuImpl runs.
enum class FlashGpuMode {
  kOwn,    // the cuda platform: the own kernels
  kCudnn,  // the cudnn platform: cuDNN's plans
  kBest,   // the GPU "auto": both, each config naming its platform
};

template <typename Traits>
class FlashGpuImpl final : public PlatformImpl {
 public:
  using P = typename Traits::ProblemType;

  explicit FlashGpuImpl(FlashGpuMode mode) : mode_(mode) {}

  // kBest says kCuda: the device's platform (its configs name the platform that runs them).
  Platform platform() const override {
    return mode_ == FlashGpuMode::kCudnn ? Platform::kCudnn : Platform::kCuda;
  }

  // cudnn: cuDNN's ("plan"); cuda and auto: the own kernels' (auto also runs cudnn configs,
  // checked by cuDNN's schema).
  const ConfigSchema& config_schema() const override {
    return mode_ == FlashGpuMode::kCudnn ? cudnn::CudnnConfigSchema() : Traits::OwnConfigFields();
  }

  bool RunsConfigsOf(std::string_view config_platform) const override {
    return PlatformImpl::RunsConfigsOf(config_platform) ||
           (mode_ == FlashGpuMode::kBest && config_platform == cudnn::kCudnnPlatform);
  }

  absl::Status Supports(const Problem& problem, const DeviceInfo& device) const override {
    KS_RETURN_IF_ERROR(CheckCudaDevice(Traits::kLabel, platform(), device));
    const P& p = ProblemAs<P>(problem);
    if (mode_ == FlashGpuMode::kCudnn) return cudnn::CudnnSupports(p, device);
    absl::Status own = Traits::OwnSupports(p);
    if (mode_ == FlashGpuMode::kOwn || own.ok()) return own;
    if (cudnn::CudnnSupports(p, device).ok()) return absl::OkStatus();
    return own;
  }

  // cuda: the own kernels' heuristic; cudnn: cuDNN's first plan. auto: the own kernels' unless
  // cuDNN runs the problem and either the own kernels do not or the measured rule
  // (Traits::PreferCudnn) picks cuDNN.
  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    if (mode_ == FlashGpuMode::kOwn) return Traits::OwnHeuristic(p, device);
    const bool own = mode_ == FlashGpuMode::kBest && Traits::OwnSupports(p).ok();
    if (own && !Traits::PreferCudnn(p, device)) {
      return Traits::OwnHeuristic(p, device);
    }
    if (cudnn::CudnnSupports(p, device).ok()) return cudnn::CudnnFlashConfig(0);
    return Traits::OwnHeuristic(p, device);
  }

  // The heuristic first, then the own kernels' configs, then cuDNN's plans (each where the
  // mode runs them).
  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    std::vector<KernelConfig> all = {Heuristic(problem, device)};
    auto add = [&all](const std::vector<KernelConfig>& configs) {
      for (const KernelConfig& c : configs) {
        if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
      }
    };
    if (mode_ != FlashGpuMode::kCudnn && Traits::OwnSupports(p).ok()) {
      add(Traits::OwnCandidates(p, device));
    }
    if (mode_ != FlashGpuMode::kOwn) add(cudnn::CudnnCandidates(p, device));
    return all;
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                           const DeviceInfo& device) const override {
    const P& p = ProblemAs<P>(problem);
    if (mode_ == FlashGpuMode::kCudnn ||
        (mode_ == FlashGpuMode::kBest && cudnn::IsCudnnConfig(config))) {
      return cudnn::CheckCudnnConfig(config, p, device);
    }
    if (cudnn::IsCudnnConfig(config)) {
      return absl::InvalidArgumentError(
          "a cudnn config runs on the cudnn platform (or \"auto\"), not on cuda");
    }
    KS_RETURN_IF_ERROR(
        Traits::OwnConfigFields().Check(config, absl::StrCat(Traits::kLabel, " on cuda")));
    KS_RETURN_IF_ERROR(Traits::OwnSupports(p));
    return Traits::CheckOwnConfig(config, p, device);
  }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo& device) const override {
    return PrepareCudaRun<typename Traits::Run, P>(*this, Traits::kLabel, problem, inputs, device);
  }

 private:
  const FlashGpuMode mode_;
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_GPU_IMPL_H_
