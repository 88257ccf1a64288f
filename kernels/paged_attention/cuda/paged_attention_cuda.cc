// The CUDA PlatformImpl of paged attention: MakePagedAttentionCuda.
#include "kernels/paged_attention/cuda/paged_attention_cuda.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/paged_attention/cuda/paged_attention_config.h"
#include "kernels/paged_attention/cuda/paged_attention_dispatch.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"
#include "kernels/paged_attention/paged_attention_kernel.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_impl.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"

namespace kernelserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceThreadResources;

// InvalidArgument unless `config` passes the schema and lies in the compiled space.
absl::Status CheckPagedConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(
      cuda::PagedAttentionCudaConfigSchema().Check(config, "paged_attention on cuda"));
  if (!cuda::IsPagedConfigCompiled(config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged attention (cuda): config is not compiled: ",
                     ExplainNotAmong(config, cuda::PagedAttentionCompiledConfigs())));
  }
  return absl::OkStatus();
}

// One call made ready on one device. Thread safety: one thread at a time (PreparedRun).
class CudaPagedAttentionRun : public cuda::CudaRun {
 public:
  CudaPagedAttentionRun(const PagedAttentionProblem& problem, const DeviceInfo& device,
                        DeviceThreadResources* resources)
      : CudaRun(device.ordinal, resources), p_(problem) {}

  // Uploads `inputs` (the caches in place when they are this GPU's memory) and allocates the
  // outputs.
  absl::Status Init(const TensorMap& inputs);
  absl::StatusOr<double> Launch(const KernelConfig& config) override;

 private:
  const PagedAttentionProblem p_;
  cuda::PagedDeviceArgs args_;
  cuda::PagedAppendArgs append_;
  DeviceBuffer q_, k_cache_, v_cache_, table_, lens_, k_, v_, k_scale_, v_scale_, workspace_;
};

absl::Status CudaPagedAttentionRun::Init(const TensorMap& inputs) {
  KS_RETURN_IF_ERROR(InitEvents());
  auto upload = [&](const char* name, DeviceBuffer& buffer) -> absl::Status {
    const Tensor& tensor = inputs.at(name);
    KS_ASSIGN_OR_RETURN(buffer, Upload(tensor.data(), tensor.nbytes()));
    return absl::OkStatus();
  };
  KS_RETURN_IF_ERROR(upload("q", q_));
  KS_RETURN_IF_ERROR(upload("k_cache", k_cache_));
  KS_RETURN_IF_ERROR(upload("v_cache", v_cache_));
  KS_RETURN_IF_ERROR(upload("block_table", table_));
  KS_RETURN_IF_ERROR(upload("cache_seqlens", lens_));
  // fp8 caches' per-head scales (absent: 1, a null pointer to the kernels).
  if (p_.has_k_scale) {
    KS_RETURN_IF_ERROR(upload("k_scale", k_scale_));
    args_.k_scale = append_.k_scale = static_cast<const float*>(k_scale_.get());
  }
  if (p_.has_v_scale) {
    KS_RETURN_IF_ERROR(upload("v_scale", v_scale_));
    args_.v_scale = append_.v_scale = static_cast<const float*>(v_scale_.get());
  }
  const std::vector<int64_t> lens = inputs.at("cache_seqlens").ToInts();
  args_.q = q_.get();
  args_.k_cache = k_cache_.get();
  args_.v_cache = v_cache_.get();
  args_.block_table = static_cast<const int32_t*>(table_.get());
  args_.cache_seqlens = static_cast<const int32_t*>(lens_.get());
  args_.batch = p_.batch;
  args_.seq_len_q = p_.seq_len_q;
  args_.num_heads_q = p_.num_heads_q;
  args_.num_heads_kv = p_.num_heads_kv;
  args_.num_pages = p_.num_pages;
  args_.page_size = p_.page_size;
  args_.max_pages = p_.max_pages;
  args_.max_seq_len = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  args_.softmax_scale = static_cast<float>(p_.softmax_scale);
  args_.causal = p_.causal;
  args_.window_left = p_.window_left;
  args_.window_right = p_.window_right;
  args_.softcap = static_cast<float>(p_.logits_soft_cap);
  if (p_.append) {
    KS_RETURN_IF_ERROR(upload("k", k_));
    KS_RETURN_IF_ERROR(upload("v", v_));
    append_.k = k_.get();
    append_.v = v_.get();
    // The caches are the schema's updated inputs: written through, in place where they are
    // this GPU's memory (a resident tensor), else in this run's own copies.
    append_.k_cache = k_cache_.get();
    append_.v_cache = v_cache_.get();
    append_.block_table = args_.block_table;
    append_.cache_seqlens = args_.cache_seqlens;
    append_.batch = p_.batch;
    append_.seq_len_q = p_.seq_len_q;
    append_.num_heads_kv = p_.num_heads_kv;
    append_.head_dim = p_.head_dim;
    append_.page_size = p_.page_size;
    append_.max_pages = p_.max_pages;
  }
  const Shape out_shape = {p_.batch, p_.seq_len_q, p_.num_heads_q, p_.head_dim};
  KS_RETURN_IF_ERROR(AddOutput("out", p_.dtype, out_shape, &args_.out));
  if (p_.return_lse) {
    KS_RETURN_IF_ERROR(
        AddOutput("lse", DType::kF32, {p_.batch, p_.num_heads_q, p_.seq_len_q}, &args_.lse));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaPagedAttentionRun::Launch(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckPagedConfig(config));
  const int splits = cuda::PagedSplits(config);
  KS_ASSIGN_OR_RETURN(
      const cuda::PagedAttentionLaunchFn attend,
      cuda::SelectPagedAttentionLaunch(p_.dtype, p_.cache_dtype, p_.head_dim, config.num_warps));
  cuda::PagedAppendLaunchFn append = nullptr;
  if (p_.append) {
    KS_ASSIGN_OR_RETURN(append, cuda::SelectPagedAppendLaunch(p_.dtype, p_.cache_dtype));
  }
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal()));
  const size_t workspace = cuda::PagedWorkspaceBytes(args_, static_cast<int>(p_.head_dim), splits);
  if (workspace_.size() < workspace) {
    workspace_ = DeviceBuffer();  // give the old one back to the pool first
    KS_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Allocate(ordinal(), workspace, stream()));
  }
  return TimedLaunch([&](cudaStream_t stream) {
    // Appending the same tokens again writes the same bytes: launches repeat safely.
    if (append != nullptr) {
      const cudaError_t error = append(append_, stream);
      if (error != cudaSuccess) return error;
    }
    return attend(args_, splits, workspace_.get(), stream);
  });
}

// The paged attention kernels as CudaImpl runs them.
struct PagedAttentionCudaTraits {
  using ProblemType = PagedAttentionProblem;
  using Run = CudaPagedAttentionRun;
  static constexpr const char* kLabel = "paged attention";

  static absl::Status Supports(const PagedAttentionProblem& p) {
    if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
      return absl::UnimplementedError(absl::StrCat("paged attention (cuda): dtype ",
                                                   Sv(DTypeName(p.dtype)),
                                                   " not supported; expected f16 or bf16"));
    }
    return cuda::SelectPagedAttentionLaunch(p.dtype, p.cache_dtype, p.head_dim,
                                            cuda::kPagedNumWarps[0])
        .status();
  }
  static KernelConfig Heuristic(const PagedAttentionProblem& p, const DeviceInfo& device) {
    return cuda::PagedAttentionHeuristic(cuda::PagedAttentionShapeOf(p), device);
  }
  static std::vector<KernelConfig> Candidates(const PagedAttentionProblem& p,
                                              const DeviceInfo& device) {
    return cuda::PagedAttentionCandidates(cuda::PagedAttentionShapeOf(p), device);
  }
  static const ConfigSchema& ConfigFields() { return cuda::PagedAttentionCudaConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config, const PagedAttentionProblem& p) {
    KS_RETURN_IF_ERROR(CheckPagedConfig(config));
    return cuda::SelectPagedAttentionLaunch(p.dtype, p.cache_dtype, p.head_dim, config.num_warps)
        .status();
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakePagedAttentionCuda() {
  return std::make_unique<cuda::CudaImpl<PagedAttentionCudaTraits>>();
}

}  // namespace kernelserve
