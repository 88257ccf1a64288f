// The CUDA PlatformImpl of mean pooling: MakeMeanPoolingCuda.
#include "kernels/mean_pooling/cuda/mean_pooling_cuda.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/mean_pooling/cuda/mean_pooling_config.h"
#include "kernels/mean_pooling/cuda/mean_pooling_dispatch.h"
#include "kernels/mean_pooling/cuda/mean_pooling_space.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_impl.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cuda/cuda_run.h"

namespace kernelserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceThreadResources;

// The sizes of the launch for config checks; varlen counts every row of x.
cuda::PoolingDeviceArgs SizesOf(const MeanPoolingProblem& p) {
  cuda::PoolingDeviceArgs args;
  args.num_sequences = p.num_sequences;
  args.seq_len = p.seq_len;
  args.used_rows = p.total_rows;
  args.hidden = p.hidden;
  return args;
}

cuda::PoolingLaunchShape LaunchShapeOf(const KernelConfig& config) {
  return {config.num_warps * 32, cuda::PoolLanes(config), config.block_size};
}

int VectorWidth(const MeanPoolingProblem& p) {
  return cuda::PoolVectorWidth(static_cast<int64_t>(ItemSize(p.dtype)), p.hidden);
}

// InvalidArgument unless `config` is compiled and its grid fits the launch limits.
absl::Status CheckPoolingConfig(const KernelConfig& config, const MeanPoolingProblem& p,
                                const cuda::PoolingDeviceArgs& args) {
  KS_RETURN_IF_ERROR(cuda::MeanPoolingCudaConfigSchema().Check(config, "mean_pooling on cuda"));
  if (!cuda::IsPoolingConfigCompiled(config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mean pooling (cuda): config is not compiled: ",
                     ExplainNotAmong(config, cuda::MeanPoolingCompiledConfigs())));
  }
  const cuda::PoolingPlan plan = cuda::PlanMeanPooling(args, LaunchShapeOf(config), VectorWidth(p));
  if (plan.tiles > cuda::kPoolMaxTiles || plan.chunks > cuda::kPoolMaxChunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean pooling (cuda): config {", config.DebugString(), "} needs a grid of ", plan.chunks,
        "x", plan.tiles, " blocks; at most ", cuda::kPoolMaxChunks, "x", cuda::kPoolMaxTiles));
  }
  return absl::OkStatus();
}

// One call made ready on one device. Thread safety: one thread at a time (PreparedRun).
class CudaMeanPoolingRun : public cuda::CudaRun {
 public:
  CudaMeanPoolingRun(const MeanPoolingProblem& problem, const DeviceInfo& device,
                     DeviceThreadResources* resources)
      : CudaRun(device.ordinal, resources), p_(problem) {}

  // Uploads `inputs` and allocates the output.
  absl::Status Init(const TensorMap& inputs);
  absl::StatusOr<double> Launch(const KernelConfig& config) override;

 private:
  // Grows the workspace to the plan's size and zeroes its counters where needed.
  absl::Status PrepareWorkspace(const cuda::PoolingPlan& plan);

  const MeanPoolingProblem p_;
  cuda::PoolingDeviceArgs args_;
  DeviceBuffer x_, mask_, cu_seqlens_, workspace_;
  size_t zeroed_bytes_ = 0;  // leading bytes of the workspace known to be zero
};

absl::Status CudaMeanPoolingRun::Init(const TensorMap& inputs) {
  KS_RETURN_IF_ERROR(InitEvents());
  const Tensor& x = inputs.at("x");
  KS_ASSIGN_OR_RETURN(x_, Upload(x.data(), x.nbytes()));
  args_ = SizesOf(p_);
  args_.x = x_.get();
  const MeanPoolingIndex index(inputs);
  if (p_.form == PoolingForm::kMasked) {
    KS_ASSIGN_OR_RETURN(mask_, Upload(index.mask.data(), index.mask.size()));
    args_.mask = static_cast<const uint8_t*>(mask_.get());
  } else if (p_.form == PoolingForm::kVarlen) {
    const std::vector<int64_t>& offsets = index.cu_seqlens;
    KS_ASSIGN_OR_RETURN(cu_seqlens_, Upload(offsets.data(), offsets.size() * sizeof(int64_t)));
    args_.cu_seqlens = static_cast<const int64_t*>(cu_seqlens_.get());
    args_.used_rows = offsets.back();
  }
  KS_RETURN_IF_ERROR(AddOutput("out", p_.dtype, {p_.num_sequences, p_.hidden}, &args_.out));
  return absl::OkStatus();
}

absl::Status CudaMeanPoolingRun::PrepareWorkspace(const cuda::PoolingPlan& plan) {
  if (workspace_.size() < plan.workspace_bytes) {
    workspace_ = DeviceBuffer();  // give the old one back to the pool first
    KS_ASSIGN_OR_RETURN(workspace_,
                        DeviceBuffer::Allocate(ordinal(), plan.workspace_bytes, stream()));
    zeroed_bytes_ = 0;
  }
  if (zeroed_bytes_ < plan.counters_bytes) {
    KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(workspace_.get(), 0, plan.counters_bytes, stream()));
    zeroed_bytes_ = plan.counters_bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaMeanPoolingRun::Launch(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckPoolingConfig(config, p_, args_));
  const int vec = VectorWidth(p_);
  KS_ASSIGN_OR_RETURN(const cuda::PoolingLaunchFn launch,
                      cuda::SelectPoolingLaunch(p_.dtype, p_.form, vec, config.num_stages));
  const cuda::PoolingLaunchShape shape = LaunchShapeOf(config);
  const cuda::PoolingPlan plan = cuda::PlanMeanPooling(args_, shape, vec);
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal()));
  KS_RETURN_IF_ERROR(PrepareWorkspace(plan));
  // A launch that fails part way may leave counters set: zero them before the next one.
  zeroed_bytes_ = 0;
  KS_ASSIGN_OR_RETURN(const double seconds, TimedLaunch([&](cudaStream_t stream) {
                        return launch(args_, shape, workspace_.get(), stream);
                      }));
  zeroed_bytes_ = plan.counters_bytes;  // the kernel leaves its counters at zero
  return seconds;
}

// The mean pooling kernels as CudaImpl runs them.
struct MeanPoolingCudaTraits {
  using ProblemType = MeanPoolingProblem;
  using Run = CudaMeanPoolingRun;
  static constexpr const char* kLabel = "mean pooling";

  static absl::Status Supports(const MeanPoolingProblem& p) {
    if (!IsFloating(p.dtype)) {
      return absl::UnimplementedError("mean pooling (cuda): expected f32, f16 or bf16");
    }
    return absl::OkStatus();
  }
  static KernelConfig Heuristic(const MeanPoolingProblem& p, const DeviceInfo& device) {
    return cuda::MeanPoolingHeuristic(cuda::MeanPoolingShapeOf(p), device);
  }
  static std::vector<KernelConfig> Candidates(const MeanPoolingProblem& p,
                                              const DeviceInfo& device) {
    return cuda::MeanPoolingCandidates(cuda::MeanPoolingShapeOf(p), device);
  }
  static const ConfigSchema& ConfigFields() { return cuda::MeanPoolingCudaConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config, const MeanPoolingProblem& p) {
    KS_RETURN_IF_ERROR(CheckPoolingConfig(config, p, SizesOf(p)));
    return cuda::SelectPoolingLaunch(p.dtype, p.form, VectorWidth(p), config.num_stages).status();
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingCuda() {
  return std::make_unique<cuda::CudaImpl<MeanPoolingCudaTraits>>();
}

}  // namespace kernelserve
