// The GPU PlatformImpls of flash attention: MakeFlashAttentionCuda, MakeFlashAttentionCudnn and
// MakeFlashAttentionGpuAuto.
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/cuda/flash_attention_cuda_run.h"
#include "kernels/flash_attention/cuda/flash_attention_dispatch.h"
#include "kernels/flash_attention/cuda/flash_attention_gpu_impl.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"
#endif

namespace kernelserve {
namespace {

using cuda::DeviceThreadResources;

// InvalidArgument unless `config` is compiled for the head dim and fits the device.
absl::Status CheckFlashConfig(const KernelConfig& config, const FlashAttentionProblem& p,
                              const DeviceInfo& device) {
  if (!cuda::IsFlashConfigCompiled(config, p.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention (cuda): config is not compiled for head dim ", p.head_dim, ": ",
        ExplainNotAmong(config, cuda::FlashAttentionCompiledConfigs(p.head_dim))));
  }
  if (!cuda::FlashConfigFits(config, p.head_dim, device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention (cuda): config {", config.DebugString(), "} needs ",
        cuda::FlashConfigSharedBytes(config, p.head_dim), " bytes of shared memory; the device ",
        "allows ", device.shared_memory_per_block_optin));
  }
  return absl::OkStatus();
}

// One call made ready on one device. Thread safety: one thread at a time (PreparedRun).
class CudaFlashAttentionRun : public cuda::FlashInputsRun {
 public:
  CudaFlashAttentionRun(const FlashAttentionProblem& problem, const DeviceInfo& device,
                        DeviceThreadResources* resources)
      : FlashInputsRun(problem, device, resources) {}

  // Uploads `inputs` and allocates the outputs.
  absl::Status Init(const TensorMap& inputs);
  absl::StatusOr<double> Launch(const KernelConfig& config) override;

 private:
  // Runs a cudnn config: the plan of cuDNN's graph for the problem.
  absl::StatusOr<double> LaunchCudnn(const KernelConfig& config);
};

absl::Status CudaFlashAttentionRun::Init(const TensorMap& inputs) {
  KS_RETURN_IF_ERROR(UploadFlashInputs(inputs));
  KS_RETURN_IF_ERROR(AddOutput("out", p_.dtype, p_.q_shape, &args_.out));
  if (p_.return_lse) {
    const Shape lse = p_.varlen ? Shape{p_.num_heads_q, p_.total_q}
                                : Shape{p_.num_sequences, p_.num_heads_q, p_.seq_len_q};
    KS_RETURN_IF_ERROR(AddOutput("lse", DType::kF32, lse, &args_.lse));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaFlashAttentionRun::Launch(const KernelConfig& config) {
  if (cudnn::IsCudnnConfig(config)) return LaunchCudnn(config);
  KS_RETURN_IF_ERROR(CheckFlashConfig(config, p_, device_));
  KS_ASSIGN_OR_RETURN(const cuda::FlashLaunchFn launch,
                      cuda::SelectFlashLaunch(p_.dtype, p_.head_dim, config));
  return TimedLaunch([&](cudaStream_t stream) {
    const cudaError_t launched = launch(args_, stream);
    if (launched != cudaSuccess) return launched;
    return cuda::LaunchFlashClearTail(args_, covered_q_, p_.head_dim, ItemSize(p_.dtype), stream);
  });
}

absl::StatusOr<double> CudaFlashAttentionRun::LaunchCudnn(const KernelConfig& config) {
#ifdef KERNELSERVE_WITH_CUDNN
  KS_ASSIGN_OR_RETURN(const int plan, cudnn::CudnnFlashPlanIndex(config));
  const cudnn::FlashPointers pointers{args_.q, args_.k, args_.v, args_.bias, args_.out, args_.lse};
  absl::Status queued;
  absl::StatusOr<double> seconds = TimedLaunch([&](cudaStream_t stream) {
    queued = cudnn::EnqueueFlashGraph(p_, plan, pointers, device_.ordinal, stream);
    return queued.ok() ? cudaSuccess : cudaErrorNotReady;
  });
  KS_RETURN_IF_ERROR(queued);
  return seconds;
#else
  (void)config;
  return absl::UnimplementedError("flash attention: this build has no cudnn platform");
#endif
}

// What flash_attention's GPU platforms (cuda::FlashGpuImpl) take from its own kernel.
struct ForwardTraits {
  using ProblemType = FlashAttentionProblem;
  using Run = CudaFlashAttentionRun;
  static constexpr const char* kLabel = "flash attention";
  static absl::Status OwnSupports(const FlashAttentionProblem& p) {
    return cuda::CheckFlashProblemSupported(p);
  }
  static KernelConfig OwnHeuristic(const FlashAttentionProblem& p, const DeviceInfo& device) {
    return cuda::FlashAttentionHeuristic(p, device);
  }
  static bool PreferCudnn(const FlashAttentionProblem& p, const DeviceInfo& device) {
    return cudnn::PreferCudnn(p, device);
  }
  static std::vector<KernelConfig> OwnCandidates(const FlashAttentionProblem& p,
                                                 const DeviceInfo& device) {
    return cuda::FlashAttentionCandidates(p, device);
  }
  static const ConfigSchema& OwnConfigFields() { return cuda::FlashAttentionCudaConfigSchema(); }
  static absl::Status CheckOwnConfig(const KernelConfig& config, const FlashAttentionProblem& p,
                                     const DeviceInfo& device) {
    return CheckFlashConfig(config, p, device);
  }
};

}  // namespace

namespace cuda {

absl::Status CheckFlashProblemSupported(const FlashAttentionProblem& p) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return absl::UnimplementedError(
        absl::StrCat("flash attention (cuda): dtype ", Sv(DTypeName(p.dtype)),
                     " has no GPU kernel (f16 and bf16 do); run it on the cpu platform"));
  }
  if (!IsFlashHeadDimCompiled(p.head_dim)) {
    return absl::UnimplementedError(absl::StrCat(
        "flash attention (cuda): head dim ", p.head_dim,
        " has no GPU kernel (compiled: 32, 64, 96, 128 and 256); run it on the cpu platform"));
  }
  if (p.num_heads_q > cuda::kMaxFlashGridYZ || p.num_sequences > cuda::kMaxFlashGridYZ) {
    return absl::UnimplementedError(absl::StrCat(
        "flash attention (cuda): ", p.num_heads_q, " heads and ", p.num_sequences,
        " sequences: the GPU kernel takes at most ", cuda::kMaxFlashGridYZ, " of each"));
  }
  return absl::OkStatus();
}

}  // namespace cuda

std::unique_ptr<PlatformImpl> MakeFlashAttentionCuda() {
  return std::make_unique<cuda::FlashGpuImpl<ForwardTraits>>(cuda::FlashGpuMode::kOwn);
}

std::unique_ptr<PlatformImpl> MakeFlashAttentionCudnn() {
  return std::make_unique<cuda::FlashGpuImpl<ForwardTraits>>(cuda::FlashGpuMode::kCudnn);
}

std::unique_ptr<PlatformImpl> MakeFlashAttentionGpuAuto() {
  return std::make_unique<cuda::FlashGpuImpl<ForwardTraits>>(cuda::FlashGpuMode::kBest);
}

}  // namespace kernelserve
