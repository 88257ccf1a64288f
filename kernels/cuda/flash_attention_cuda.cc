// The CUDA PlatformImpl of flash attention: MakeCudaFlashAttention.
#include "kernels/cuda/flash_attention_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_platform.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/flash_attention_config.h"
#include "kernels/cuda/flash_attention_dispatch.h"

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
class CudaFlashAttentionRun : public PreparedRun {
 public:
  CudaFlashAttentionRun(const FlashAttentionProblem& p, const DeviceInfo& device,
                        cudaStream_t stream)
      : problem_(p), device_(device), stream_(stream) {}
  ~CudaFlashAttentionRun() override {
    // Errors cannot be reported from a destructor.
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
  }

  // Allocates the device buffers and uploads `inputs` through `res`'s staging buffer.
  absl::Status Init(const TensorMap& inputs, DeviceThreadResources& res);

  absl::StatusOr<double> Launch(const KernelConfig& config) override;
  absl::StatusOr<TensorMap> Fetch() override;
  double upload_seconds() const override { return upload_seconds_; }

  // See PoisonFlashAttentionOutputs.
  absl::Status Poison() {
    KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    if (out_.size() > 0) {
      KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out_.get(), 0xff, out_.size(), stream_));
    }
    if (lse_.size() > 0) {
      KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(lse_.get(), 0xff, lse_.size(), stream_));
    }
    KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  absl::Status Upload(const void* host, size_t bytes, DeviceThreadResources& res,
                      DeviceBuffer& dst) {
    KS_ASSIGN_OR_RETURN(dst, DeviceBuffer::Allocate(device_.ordinal, bytes, stream_));
    if (bytes == 0) return absl::OkStatus();
    return res.Upload(host, bytes, dst.get(), stream_);
  }
  absl::Status UploadIndexInputs(const TensorMap& inputs, DeviceThreadResources& res);

  const FlashAttentionProblem problem_;
  const DeviceInfo device_;
  const cudaStream_t stream_;
  cuda::FlashDeviceArgs args_;
  int64_t covered_q_ = 0;  // q rows inside sequences (the rest are zeroed)
  DeviceBuffer q_, k_, v_, out_, lse_, bias_, cu_q_, cu_k_, seg_q_, seg_k_;
  Shape out_shape_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  bool launched_ = false;
  double upload_seconds_ = 0.0;
};

absl::Status CudaFlashAttentionRun::UploadIndexInputs(const TensorMap& inputs,
                                                      DeviceThreadResources& res) {
  const FlashAttentionProblem& p = problem_;
  covered_q_ = p.num_sequences * p.seq_len_q;
  if (p.varlen) {
    const std::vector<int64_t> cu_q = inputs.at("cu_seqlens_q").ToInts();
    const std::vector<int64_t> cu_k = inputs.at("cu_seqlens_k").ToInts();
    KS_RETURN_IF_ERROR(Upload(cu_q.data(), cu_q.size() * sizeof(int64_t), res, cu_q_));
    KS_RETURN_IF_ERROR(Upload(cu_k.data(), cu_k.size() * sizeof(int64_t), res, cu_k_));
    args_.cu_seqlens_q = static_cast<const int64_t*>(cu_q_.get());
    args_.cu_seqlens_k = static_cast<const int64_t*>(cu_k_.get());
    for (size_t i = 0; i + 1 < cu_q.size(); ++i) {
      args_.max_seq_len_q = std::max(args_.max_seq_len_q, cu_q[i + 1] - cu_q[i]);
    }
    covered_q_ = cu_q.back();
  }
  if (p.has_segment_ids) {
    const std::vector<int64_t> sq = IntsOrEmpty(inputs, "q_segment_ids");
    const std::vector<int64_t> sk = IntsOrEmpty(inputs, "kv_segment_ids");
    KS_RETURN_IF_ERROR(Upload(sq.data(), sq.size() * sizeof(int64_t), res, seg_q_));
    KS_RETURN_IF_ERROR(Upload(sk.data(), sk.size() * sizeof(int64_t), res, seg_k_));
    args_.q_segment_ids = static_cast<const int64_t*>(seg_q_.get());
    args_.kv_segment_ids = static_cast<const int64_t*>(seg_k_.get());
  }
  return absl::OkStatus();
}

absl::Status CudaFlashAttentionRun::Init(const TensorMap& inputs, DeviceThreadResources& res) {
  const auto started = std::chrono::steady_clock::now();
  const FlashAttentionProblem& p = problem_;
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
  const Tensor& q = inputs.at("q");
  KS_RETURN_IF_ERROR(Upload(q.data(), q.nbytes(), res, q_));
  KS_RETURN_IF_ERROR(Upload(inputs.at("k").data(), inputs.at("k").nbytes(), res, k_));
  KS_RETURN_IF_ERROR(Upload(inputs.at("v").data(), inputs.at("v").nbytes(), res, v_));
  args_.q = q_.get();
  args_.k = k_.get();
  args_.v = v_.get();
  args_.total_q = p.total_q;
  args_.total_k = p.total_k;
  args_.num_heads_q = p.num_heads_q;
  args_.num_heads_kv = p.num_heads_kv;
  args_.num_sequences = p.num_sequences;
  args_.seq_len_q = p.seq_len_q;
  args_.seq_len_k = p.seq_len_k;
  args_.softmax_scale = static_cast<float>(p.softmax_scale);
  args_.causal = p.causal;
  args_.window_left = p.window_left;
  args_.window_right = p.window_right;
  args_.softcap = static_cast<float>(p.logits_soft_cap);
  KS_RETURN_IF_ERROR(UploadIndexInputs(inputs, res));
  if (p.has_bias) {
    const Tensor& bias = inputs.at("bias");
    KS_RETURN_IF_ERROR(Upload(bias.data(), bias.nbytes(), res, bias_));
    args_.bias = static_cast<const float*>(bias_.get());
    const int64_t plane = p.seq_len_q * p.seq_len_k;
    args_.bias_head_stride = p.bias_heads == 1 ? 0 : plane;
    args_.bias_batch_stride = p.bias_batch == 1 ? 0 : p.bias_heads * plane;
  }
  out_shape_ = q.shape();
  KS_ASSIGN_OR_RETURN(out_, DeviceBuffer::Allocate(device_.ordinal, q.nbytes(), stream_));
  args_.out = out_.get();
  if (p.return_lse) {
    const size_t lse_bytes = static_cast<size_t>(p.num_heads_q * p.total_q) * sizeof(float);
    KS_ASSIGN_OR_RETURN(lse_, DeviceBuffer::Allocate(device_.ordinal, lse_bytes, stream_));
    args_.lse = static_cast<float*>(lse_.get());
  }
  KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  upload_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return absl::OkStatus();
}

absl::StatusOr<double> CudaFlashAttentionRun::Launch(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckFlashConfig(config, problem_, device_));
  KS_ASSIGN_OR_RETURN(const cuda::FlashLaunchFn launch,
                      cuda::SelectFlashLaunch(problem_.dtype, problem_.head_dim, config));
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
  launched_ = false;
  KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_));
  KS_CUDA_RETURN_IF_ERROR(launch(args_, stream_));
  KS_CUDA_RETURN_IF_ERROR(cuda::LaunchFlashClearTail(args_, covered_q_, problem_.head_dim,
                                                     ItemSize(problem_.dtype), stream_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
  float ms = 0.0f;
  KS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
  launched_ = true;
  return static_cast<double>(ms) * 1e-3;
}

absl::StatusOr<TensorMap> CudaFlashAttentionRun::Fetch() {
  if (!launched_) {
    return absl::FailedPreconditionError(
        "flash attention (cuda): Fetch before a successful Launch");
  }
  KS_ASSIGN_OR_RETURN(DeviceThreadResources * res, cuda::ThisThreadResources(device_.ordinal));
  TensorMap outputs;
  Tensor out = Tensor::Empty(problem_.dtype, out_shape_);
  if (out.nbytes() > 0) {
    KS_RETURN_IF_ERROR(res->Download(out_.get(), out.nbytes(), out.data(), stream_));
  }
  outputs.emplace("out", std::move(out));
  if (problem_.return_lse) {
    const Shape shape =
        problem_.varlen ? Shape{problem_.num_heads_q, problem_.total_q}
                        : Shape{problem_.num_sequences, problem_.num_heads_q, problem_.seq_len_q};
    Tensor lse = Tensor::Empty(DType::kF32, shape);
    if (lse.nbytes() > 0) {
      KS_RETURN_IF_ERROR(res->Download(lse_.get(), lse.nbytes(), lse.data(), stream_));
    }
    outputs.emplace("lse", std::move(lse));
  }
  return outputs;
}

// Thread safety: stateless; every call is independent.
class CudaFlashAttentionImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCuda; }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                       const Attributes& attrs,
                                                       const DeviceInfo& device) override {
    if (device.platform != Platform::kCuda || device.ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("flash attention (cuda): expected a CUDA device, got ",
                       Sv(PlatformName(device.platform)), " ordinal ", device.ordinal));
    }
    KS_ASSIGN_OR_RETURN(const FlashAttentionProblem problem,
                        AnalyzeFlashAttention(SpecsOf(inputs), attrs));
    KS_RETURN_IF_ERROR(cuda::CheckFlashProblemSupported(problem));
    KS_ASSIGN_OR_RETURN(DeviceThreadResources * res, cuda::ThisThreadResources(device.ordinal));
    auto run = std::make_unique<CudaFlashAttentionRun>(problem, device, res->stream());
    KS_RETURN_IF_ERROR(run->Init(inputs, *res));
    return std::unique_ptr<PreparedRun>(std::move(run));
  }

  absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap& inputs,
                           const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda) {
      return absl::InvalidArgumentError("flash attention (cuda): the device is not a CUDA GPU");
    }
    KS_ASSIGN_OR_RETURN(const FlashAttentionProblem problem, AnalyzeFlashAttention(inputs, {}));
    KS_RETURN_IF_ERROR(cuda::CheckFlashProblemSupported(problem));
    return CheckFlashConfig(config, problem, device);
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
  if (p.num_heads_q > kMaxGridYZ || p.num_sequences > kMaxGridYZ) {
    return absl::UnimplementedError(
        absl::StrCat("flash attention (cuda): ", p.num_heads_q, " heads and ", p.num_sequences,
                     " sequences: the GPU kernel takes at most ", kMaxGridYZ, " of each"));
  }
  return absl::OkStatus();
}

absl::Status PoisonFlashAttentionOutputs(PreparedRun& run) {
  auto* cuda_run = dynamic_cast<CudaFlashAttentionRun*>(&run);
  if (cuda_run == nullptr) {
    return absl::InvalidArgumentError(
        "PoisonFlashAttentionOutputs: not a CUDA flash attention run");
  }
  return cuda_run->Poison();
}

}  // namespace cuda

std::unique_ptr<PlatformImpl> MakeCudaFlashAttention() {
  return std::make_unique<CudaFlashAttentionImpl>();
}

}  // namespace kernelserve
