// The GPU PlatformImpls of flash_attention_bwd: MakeFlashAttentionBwdCuda,
// MakeFlashAttentionBwdCudnn and MakeFlashAttentionBwdGpuAuto.
#include "kernels/flash_attention/cuda/flash_attention_bwd_cuda.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_config.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_dispatch.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/cuda/flash_attention_cuda_run.h"
#include "kernels/flash_attention/cuda/flash_attention_gpu_impl.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#ifdef KERNELSERVE_WITH_CUDNN
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"
#endif

namespace kernelserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceThreadResources;

// What a row that sees no key (lse -inf) gets instead: exp(logit - it) is 0 for every logit,
// so the row contributes nothing, as the contract says, where -inf would give inf * 0.
constexpr float kNoKeyLse = 1e30f;

// The lse as the kernels read it: -inf rows made kNoKeyLse.
std::vector<float> FiniteLse(const Tensor& lse) {
  const auto* values = lse.data_as<float>();
  std::vector<float> out(values, values + lse.numel());
  for (float& value : out) {
    if (std::isinf(value) && value < 0) value = kNoKeyLse;
  }
  return out;
}

// InvalidArgument unless `config` is compiled for the head dim and fits the device.
absl::Status CheckFlashBwdConfig(const KernelConfig& config, const FlashAttentionBwdProblem& p,
                                 const DeviceInfo& device) {
  const int64_t d = p.fwd.head_dim;
  if (!cuda::IsFlashBwdConfigCompiled(config, d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flash_attention_bwd (cuda): config is not compiled for head dim ", d, ": ",
                     ExplainNotAmong(config, cuda::FlashAttentionBwdCompiledConfigs(d))));
  }
  if (!cuda::FlashBwdConfigFits(config, d, device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash_attention_bwd (cuda): config {", config.DebugString(), "} needs ",
        cuda::FlashBwdConfigSharedBytes(config, d), " bytes of shared memory; the device allows ",
        device.shared_memory_per_block_optin));
  }
  return absl::OkStatus();
}

// One call made ready on one device: the forward's inputs, out, dout, the lse (finite) and
// the D workspace, and dq, dk, dv (and dbias). Thread safety: one thread at a time.
class CudaFlashBwdRun : public cuda::FlashInputsRun {
 public:
  CudaFlashBwdRun(const FlashAttentionBwdProblem& problem, const DeviceInfo& device,
                  DeviceThreadResources* resources)
      : FlashInputsRun(problem.fwd, device, resources), bwd_problem_(problem) {}

  absl::Status Init(const TensorMap& inputs) {
    KS_RETURN_IF_ERROR(UploadFlashInputs(inputs));
    const Tensor& out = inputs.at("out");
    const Tensor& dout = inputs.at("dout");
    KS_ASSIGN_OR_RETURN(out_, Upload(out.data(), out.nbytes()));
    KS_ASSIGN_OR_RETURN(dout_, Upload(dout.data(), dout.nbytes()));
    const std::vector<float> lse = FiniteLse(inputs.at("lse"));
    KS_ASSIGN_OR_RETURN(lse_, Upload(lse.data(), lse.size() * sizeof(float)));
    KS_ASSIGN_OR_RETURN(dsum_,
                        DeviceBuffer::Allocate(ordinal(), lse.size() * sizeof(float), stream()));
    args_.out = out_.get();
    args_.lse = static_cast<float*>(lse_.get());
    bwd_.fwd = args_;
    bwd_.dout = dout_.get();
    bwd_.dsum = static_cast<float*>(dsum_.get());
    bwd_.max_seq_len_k = max_seq_len_k_;
    KS_RETURN_IF_ERROR(AddOutput("dq", p_.dtype, p_.q_shape, &bwd_.dq));
    KS_RETURN_IF_ERROR(AddOutput("dk", p_.dtype, bwd_problem_.k_shape, &bwd_.dk));
    KS_RETURN_IF_ERROR(AddOutput("dv", p_.dtype, bwd_problem_.k_shape, &bwd_.dv));
    if (bwd_problem_.return_dbias) {
      KS_RETURN_IF_ERROR(AddOutput("dbias", DType::kF32, inputs.at("bias").shape(), &dbias_));
      bwd_.dbias = dbias_;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    if (cudnn::IsCudnnConfig(config)) return LaunchCudnn(config);
    KS_RETURN_IF_ERROR(cuda::CheckFlashBwdProblemSupported(bwd_problem_));
    KS_RETURN_IF_ERROR(CheckFlashBwdConfig(config, bwd_problem_, device_));
    KS_ASSIGN_OR_RETURN(const cuda::FlashBwdLaunchFn launch,
                        cuda::SelectFlashBwdLaunch(p_.dtype, p_.head_dim, config));
    if (config.algorithm == cuda::kFlashWgmmaAlgorithm) {
      KS_RETURN_IF_ERROR(AllocateWgmmaWorkspace(config.block_q, config.block_k));
    }
    return TimedLaunch([&](cudaStream_t stream) { return launch(bwd_, stream); });
  }

 private:
  // The wgmma kernel's dq_accum (fp32, [Hq, total_q, D]), where the group is split its
  // dkv_accum (fp32 dK and dV), and for a deterministic call their locks (as many as the tiles
  // of block_q and block_k rows need); allocated by the first wgmma launch that needs them.
  absl::Status AllocateWgmmaWorkspace(int block_q, int block_k) {
    if (bwd_.dq_accum == nullptr) {
      const size_t values = static_cast<size_t>(args_.total_q * args_.num_heads_q * p_.head_dim);
      KS_ASSIGN_OR_RETURN(dq_accum_,
                          DeviceBuffer::Allocate(ordinal(), values * sizeof(float), stream()));
      bwd_.dq_accum = static_cast<float*>(dq_accum_.get());
    }
    const bool split = cuda::FlashBwdGroupSplit(args_) > 1;
    if (split && bwd_.dkv_accum == nullptr) {
      const size_t values =
          2 * static_cast<size_t>(args_.total_k * args_.num_heads_kv * p_.head_dim);
      KS_ASSIGN_OR_RETURN(dkv_accum_,
                          DeviceBuffer::Allocate(ordinal(), values * sizeof(float), stream()));
      bwd_.dkv_accum = static_cast<float*>(dkv_accum_.get());
    }
    if (!bwd_problem_.deterministic) return absl::OkStatus();
    const size_t locks = cuda::FlashBwdLockCount(args_, block_q);
    if (locks > lock_count_) {
      KS_ASSIGN_OR_RETURN(dq_locks_,
                          DeviceBuffer::Allocate(ordinal(), locks * sizeof(int), stream()));
      bwd_.dq_locks = static_cast<int*>(dq_locks_.get());
      lock_count_ = locks;
    }
    const size_t kv_locks = split ? cuda::FlashBwdKvLockCount(bwd_, block_k) : 0;
    if (kv_locks > kv_lock_count_) {
      KS_ASSIGN_OR_RETURN(dkv_locks_,
                          DeviceBuffer::Allocate(ordinal(), kv_locks * sizeof(int), stream()));
      bwd_.dkv_locks = static_cast<int*>(dkv_locks_.get());
      kv_lock_count_ = kv_locks;
    }
    return absl::OkStatus();
  }

  // Runs a cudnn config: the plan of cuDNN's backward graph for the problem.
  absl::StatusOr<double> LaunchCudnn(const KernelConfig& config) {
#ifdef KERNELSERVE_WITH_CUDNN
    KS_ASSIGN_OR_RETURN(const int plan, cudnn::CudnnFlashPlanIndex(config));
    const cudnn::FlashBwdPointers pointers{args_.q,   args_.k,   args_.v,   args_.bias,
                                           args_.out, bwd_.dout, args_.lse, bwd_.dq,
                                           bwd_.dk,   bwd_.dv,   dbias_};
    absl::Status queued;
    absl::StatusOr<double> seconds = TimedLaunch([&](cudaStream_t stream) {
      queued = cudnn::EnqueueFlashGraph(bwd_problem_, plan, pointers, device_.ordinal, stream);
      return queued.ok() ? cudaSuccess : cudaErrorNotReady;
    });
    KS_RETURN_IF_ERROR(queued);
    return seconds;
#else
    (void)config;
    return absl::UnimplementedError("flash_attention_bwd: this build has no cudnn platform");
#endif
  }

  const FlashAttentionBwdProblem bwd_problem_;
  cuda::FlashBwdDeviceArgs bwd_;
  float* dbias_ = nullptr;
  size_t lock_count_ = 0;     // of dq_locks_
  size_t kv_lock_count_ = 0;  // of dkv_locks_
  DeviceBuffer out_, dout_, lse_, dsum_, dq_accum_, dq_locks_, dkv_accum_, dkv_locks_;
};

// What flash_attention_bwd's GPU platforms (cuda::FlashGpuImpl) take from its own kernels.
struct BackwardTraits {
  using ProblemType = FlashAttentionBwdProblem;
  using Run = CudaFlashBwdRun;
  static constexpr const char* kLabel = "flash_attention_bwd";
  static absl::Status OwnSupports(const FlashAttentionBwdProblem& p) {
    return cuda::CheckFlashBwdProblemSupported(p);
  }
  static KernelConfig OwnHeuristic(const FlashAttentionBwdProblem& p, const DeviceInfo& device) {
    return cuda::FlashAttentionBwdHeuristic(p, device);
  }
  static bool PreferCudnn(const FlashAttentionBwdProblem& p, const DeviceInfo& device) {
    return cudnn::PreferCudnnBackward(p.fwd, device);
  }
  static std::vector<KernelConfig> OwnCandidates(const FlashAttentionBwdProblem& p,
                                                 const DeviceInfo& device) {
    return cuda::FlashAttentionBwdCandidates(p, device);
  }
  static const ConfigSchema& OwnConfigFields() { return cuda::FlashAttentionBwdCudaConfigSchema(); }
  static absl::Status CheckOwnConfig(const KernelConfig& config, const FlashAttentionBwdProblem& p,
                                     const DeviceInfo& device) {
    return CheckFlashBwdConfig(config, p, device);
  }
};

}  // namespace

namespace cuda {

absl::Status CheckFlashBwdProblemSupported(const FlashAttentionBwdProblem& problem) {
  const FlashAttentionProblem& p = problem.fwd;
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return absl::UnimplementedError(
        absl::StrCat("flash_attention_bwd (cuda): dtype ", Sv(DTypeName(p.dtype)),
                     " has no GPU kernel (f16 and bf16 do); run it on the cpu platform"));
  }
  if (!IsFlashBwdHeadDimCompiled(p.head_dim)) {
    return absl::UnimplementedError(absl::StrCat("flash_attention_bwd (cuda): head dim ",
                                                 p.head_dim,
                                                 " has no GPU kernel (compiled: 64 and 128)"));
  }
  if (p.num_heads_q > cuda::kMaxFlashGridYZ || p.num_sequences > cuda::kMaxFlashGridYZ) {
    return absl::UnimplementedError(absl::StrCat(
        "flash_attention_bwd (cuda): ", p.num_heads_q, " heads and ", p.num_sequences,
        " sequences: the GPU kernels take at most ", cuda::kMaxFlashGridYZ, " of each"));
  }
  return absl::OkStatus();
}

}  // namespace cuda

std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCuda() {
  return std::make_unique<cuda::FlashGpuImpl<BackwardTraits>>(cuda::FlashGpuMode::kOwn);
}

std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCudnn() {
  return std::make_unique<cuda::FlashGpuImpl<BackwardTraits>>(cuda::FlashGpuMode::kCudnn);
}

std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdGpuAuto() {
  return std::make_unique<cuda::FlashGpuImpl<BackwardTraits>>(cuda::FlashGpuMode::kBest);
}

}  // namespace kernelserve
