// The CUDA PlatformImpl of flash attention: MakeFlashAttentionCuda.
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/cuda/flash_attention_dispatch.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"
#include "kernels/runtime/cudnn/cudnn_library.h"
#endif

namespace kernelserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceThreadResources;

// Grid limits of one launch (gridDim.y = heads, gridDim.z = sequences).
constexpr int64_t kMaxGridYZ = 65535;

std::vector<int64_t> IntsOrEmpty(const TensorMap& inputs, const std::string& name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? std::vector<int64_t>() : it->second.ToInts();
}

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
class CudaFlashAttentionRun : public cuda::CudaRun {
 public:
  CudaFlashAttentionRun(const FlashAttentionProblem& problem, const DeviceInfo& device,
                        DeviceThreadResources* resources)
      : CudaRun(device.ordinal, resources), p_(problem), device_(device) {}

  // Uploads `inputs` and allocates the outputs.
  absl::Status Init(const TensorMap& inputs);
  absl::StatusOr<double> Launch(const KernelConfig& config) override;

 private:
  // Runs a cudnn config: the plan of cuDNN's graph for the problem.
  absl::StatusOr<double> LaunchCudnn(const KernelConfig& config);
  absl::Status UploadIndexInputs(const TensorMap& inputs);

  const FlashAttentionProblem p_;
  const DeviceInfo device_;
  cuda::FlashDeviceArgs args_;
  int64_t covered_q_ = 0;  // q rows inside sequences (the rest are zeroed)
  DeviceBuffer q_, k_, v_, bias_, cu_q_, cu_k_, seg_q_, seg_k_;
};

absl::Status CudaFlashAttentionRun::UploadIndexInputs(const TensorMap& inputs) {
  covered_q_ = p_.num_sequences * p_.seq_len_q;
  if (p_.varlen) {
    const std::vector<int64_t> cu_q = inputs.at("cu_seqlens_q").ToInts();
    const std::vector<int64_t> cu_k = inputs.at("cu_seqlens_k").ToInts();
    KS_ASSIGN_OR_RETURN(cu_q_, Upload(cu_q.data(), cu_q.size() * sizeof(int64_t)));
    KS_ASSIGN_OR_RETURN(cu_k_, Upload(cu_k.data(), cu_k.size() * sizeof(int64_t)));
    args_.cu_seqlens_q = static_cast<const int64_t*>(cu_q_.get());
    args_.cu_seqlens_k = static_cast<const int64_t*>(cu_k_.get());
    for (size_t i = 0; i + 1 < cu_q.size(); ++i) {
      args_.max_seq_len_q = std::max(args_.max_seq_len_q, cu_q[i + 1] - cu_q[i]);
    }
    covered_q_ = cu_q.back();
  }
  if (p_.has_segment_ids) {
    const std::vector<int64_t> sq = IntsOrEmpty(inputs, "q_segment_ids");
    const std::vector<int64_t> sk = IntsOrEmpty(inputs, "kv_segment_ids");
    KS_ASSIGN_OR_RETURN(seg_q_, Upload(sq.data(), sq.size() * sizeof(int64_t)));
    KS_ASSIGN_OR_RETURN(seg_k_, Upload(sk.data(), sk.size() * sizeof(int64_t)));
    args_.q_segment_ids = static_cast<const int64_t*>(seg_q_.get());
    args_.kv_segment_ids = static_cast<const int64_t*>(seg_k_.get());
  }
  return absl::OkStatus();
}

absl::Status CudaFlashAttentionRun::Init(const TensorMap& inputs) {
  KS_RETURN_IF_ERROR(InitEvents());
  const Tensor& q = inputs.at("q");
  KS_ASSIGN_OR_RETURN(q_, Upload(q.data(), q.nbytes()));
  KS_ASSIGN_OR_RETURN(k_, Upload(inputs.at("k").data(), inputs.at("k").nbytes()));
  KS_ASSIGN_OR_RETURN(v_, Upload(inputs.at("v").data(), inputs.at("v").nbytes()));
  args_.q = q_.get();
  args_.k = k_.get();
  args_.v = v_.get();
  args_.total_q = p_.total_q;
  args_.total_k = p_.total_k;
  args_.num_heads_q = p_.num_heads_q;
  args_.num_heads_kv = p_.num_heads_kv;
  args_.num_sequences = p_.num_sequences;
  args_.seq_len_q = p_.seq_len_q;
  args_.seq_len_k = p_.seq_len_k;
  args_.softmax_scale = static_cast<float>(p_.softmax_scale);
  args_.causal = p_.causal;
  args_.window_left = p_.window_left;
  args_.window_right = p_.window_right;
  args_.softcap = static_cast<float>(p_.logits_soft_cap);
  KS_RETURN_IF_ERROR(UploadIndexInputs(inputs));
  if (p_.has_bias) {
    const Tensor& bias = inputs.at("bias");
    KS_ASSIGN_OR_RETURN(bias_, Upload(bias.data(), bias.nbytes()));
    args_.bias = static_cast<const float*>(bias_.get());
    const int64_t plane = p_.seq_len_q * p_.seq_len_k;
    args_.bias_head_stride = p_.bias_heads == 1 ? 0 : plane;
    args_.bias_batch_stride = p_.bias_batch == 1 ? 0 : p_.bias_heads * plane;
  }
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

// OK when cuDNN runs the problem on `device`; otherwise why not: Unimplemented for what it does
// not run, the load or build failure's own status for the rest.
absl::Status CudnnSupports(const FlashAttentionProblem& p, const DeviceInfo& device) {
  KS_RETURN_IF_ERROR(cudnn::CheckCudnnFlashRules(p));
#ifdef KERNELSERVE_WITH_CUDNN
  if (absl::StatusOr<int64_t> loaded = cudnn::LoadCudnn(); !loaded.ok()) {
    return absl::UnimplementedError(loaded.status().message());
  }
  return cudnn::CheckFlashGraph(p, device.ordinal);
#else
  (void)device;
  return absl::UnimplementedError("flash attention: this build has no cudnn platform");
#endif
}

// The number of cuDNN plans that built for the problem; CudnnSupports' status when cuDNN does
// not run it.
absl::StatusOr<int> CudnnPlanCount(const FlashAttentionProblem& p, const DeviceInfo& device) {
  KS_RETURN_IF_ERROR(CudnnSupports(p, device));
#ifdef KERNELSERVE_WITH_CUDNN
  return cudnn::FlashPlanCount(p, device.ordinal);
#else
  return 0;
#endif
}

// The cudnn configs of the problem (cuDNN's plans that built), or none.
std::vector<KernelConfig> CudnnCandidates(const FlashAttentionProblem& p,
                                          const DeviceInfo& device) {
  std::vector<KernelConfig> configs;
  const int plans = CudnnPlanCount(p, device).value_or(0);
  for (int i = 0; i < plans; ++i) configs.push_back(cudnn::CudnnFlashConfig(i));
  return configs;
}

// InvalidArgument unless `config` is a plan of the problem's cuDNN graph.
absl::Status CheckCudnnConfig(const KernelConfig& config, const FlashAttentionProblem& p,
                              const DeviceInfo& device) {
  KS_ASSIGN_OR_RETURN(const int plan, cudnn::CudnnFlashPlanIndex(config));
  const absl::StatusOr<int> plans = CudnnPlanCount(p, device);
  if (!plans.ok()) return absl::InvalidArgumentError(plans.status().message());
  if (plan >= *plans) {
    return absl::InvalidArgumentError(absl::StrCat("flash attention (cudnn): plan", plan,
                                                   " does not exist; this problem has ", *plans,
                                                   " plan(s)"));
  }
  return absl::OkStatus();
}

// The cuda platform (the own kernel, and cuDNN's plans as more candidates where cuDNN runs the
// problem) or, with only_cudnn, the cudnn platform (cuDNN's plans alone). Both run on the same
// uploads (CudaFlashAttentionRun).
// Thread safety: stateless; every call is independent.
class CudaFlashAttentionImpl : public PlatformImpl {
 public:
  explicit CudaFlashAttentionImpl(bool only_cudnn) : only_cudnn_(only_cudnn) {}

  Platform platform() const override { return only_cudnn_ ? Platform::kCudnn : Platform::kCuda; }

  bool RunsConfigsOf(std::string_view config_platform) const override {
    return PlatformImpl::RunsConfigsOf(config_platform) ||
           (!only_cudnn_ && config_platform == cudnn::kCudnnPlatform);
  }

  absl::Status Supports(const Problem& problem, const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda) {
      return absl::UnimplementedError(absl::StrCat(
          "flash attention (", Sv(PlatformName(platform())), "): the device is not a CUDA GPU"));
    }
    const auto& p = ProblemAs<FlashAttentionProblem>(problem);
    if (only_cudnn_) return CudnnSupports(p, device);
    absl::Status own = cuda::CheckFlashProblemSupported(p);
    if (own.ok() || CudnnSupports(p, device).ok()) return absl::OkStatus();
    return own;
  }

  // The own kernel's heuristic unless cuDNN runs the problem and either the own kernel does
  // not or the measured rule (cudnn::PreferCudnn) picks cuDNN: then cuDNN's first plan.
  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    const auto& p = ProblemAs<FlashAttentionProblem>(problem);
    const bool own = !only_cudnn_ && cuda::CheckFlashProblemSupported(p).ok();
    if (own && !cudnn::PreferCudnn(p, device)) return cuda::FlashAttentionHeuristic(p, device);
    if (CudnnSupports(p, device).ok()) return cudnn::CudnnFlashConfig(0);
    return cuda::FlashAttentionHeuristic(p, device);
  }

  // The heuristic first, then the own kernel's configs, then cuDNN's plans.
  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    const auto& p = ProblemAs<FlashAttentionProblem>(problem);
    std::vector<KernelConfig> all = {Heuristic(problem, device)};
    auto add = [&all](const std::vector<KernelConfig>& configs) {
      for (const KernelConfig& c : configs) {
        if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
      }
    };
    if (!only_cudnn_ && cuda::CheckFlashProblemSupported(p).ok()) {
      add(cuda::FlashAttentionCandidates(p, device));
    }
    add(CudnnCandidates(p, device));
    return all;
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                           const DeviceInfo& device) const override {
    const auto& p = ProblemAs<FlashAttentionProblem>(problem);
    if (cudnn::IsCudnnConfig(config) || only_cudnn_) return CheckCudnnConfig(config, p, device);
    KS_RETURN_IF_ERROR(cuda::CheckFlashProblemSupported(p));
    return CheckFlashConfig(config, p, device);
  }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda || device.ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flash attention (", Sv(PlatformName(platform())), "): expected a CUDA device, got ",
          Sv(PlatformName(device.platform)), " ordinal ", device.ordinal));
    }
    KS_RETURN_IF_ERROR(Supports(problem, device));
    KS_ASSIGN_OR_RETURN(DeviceThreadResources * resources,
                        cuda::ThisThreadResources(device.ordinal));
    auto run = std::make_unique<CudaFlashAttentionRun>(ProblemAs<FlashAttentionProblem>(problem),
                                                       device, resources);
    KS_RETURN_IF_ERROR(run->Init(inputs));
    return std::unique_ptr<PreparedRun>(std::move(run));
  }

 private:
  const bool only_cudnn_;
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
  if (p.num_heads_q > kMaxGridYZ || p.num_sequences > kMaxGridYZ) {
    return absl::UnimplementedError(
        absl::StrCat("flash attention (cuda): ", p.num_heads_q, " heads and ", p.num_sequences,
                     " sequences: the GPU kernel takes at most ", kMaxGridYZ, " of each"));
  }
  return absl::OkStatus();
}

}  // namespace cuda

std::unique_ptr<PlatformImpl> MakeFlashAttentionCuda() {
  return std::make_unique<CudaFlashAttentionImpl>(/*only_cudnn=*/false);
}

std::unique_ptr<PlatformImpl> MakeFlashAttentionCudnn() {
  return std::make_unique<CudaFlashAttentionImpl>(/*only_cudnn=*/true);
}

}  // namespace kernelserve
