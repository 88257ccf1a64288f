// The CUDA PlatformImpl of mean_pooling_bwd: MakeMeanPoolingBwdCuda.
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_config.h"
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_launch.h"
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
using LaunchFn = cudaError_t (*)(const cuda::PoolingBwdDeviceArgs&, int, int, cudaStream_t);

cuda::PoolingBwdShape ShapeOf(const MeanPoolingProblem& p) {
  return {p.dtype, p.total_rows, p.hidden};
}

// 16-byte vectors when whole rows are made of them, as in the forward.
int VectorWidth(const MeanPoolingProblem& p) {
  return cuda::PoolVectorWidth(static_cast<int64_t>(ItemSize(p.dtype)), p.hidden);
}

// The one switch of runtime dtype and vector width to a compiled launcher.
absl::StatusOr<LaunchFn> SelectLaunch(DType dtype, int vec) {
  switch (dtype) {
    case DType::kF32:
      return vec == 4 ? &cuda::LaunchMeanPoolingBwd<float, 4>
                      : &cuda::LaunchMeanPoolingBwd<float, 1>;
    case DType::kF16:
      return vec == 8 ? &cuda::LaunchMeanPoolingBwd<__half, 8>
                      : &cuda::LaunchMeanPoolingBwd<__half, 1>;
    case DType::kBF16:
      return vec == 8 ? &cuda::LaunchMeanPoolingBwd<__nv_bfloat16, 8>
                      : &cuda::LaunchMeanPoolingBwd<__nv_bfloat16, 1>;
    default:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(
      "mean_pooling_bwd (cuda): dtype ", Sv(DTypeName(dtype)), ": expected f32, f16 or bf16"));
}

// Counted rows of each sequence as float (as the CPU platform divides by them).
std::vector<float> Counts(const MeanPoolingProblem& p, const MeanPoolingIndex& index) {
  std::vector<float> counts(static_cast<size_t>(p.num_sequences), static_cast<float>(p.seq_len));
  if (p.form == PoolingForm::kVarlen) {
    const std::vector<int64_t>& offsets = index.cu_seqlens;
    for (size_t n = 0; n < counts.size(); ++n) {
      counts[n] = static_cast<float>(offsets[n + 1] - offsets[n]);
    }
  } else if (p.form == PoolingForm::kMasked) {
    for (size_t n = 0; n < counts.size(); ++n) {
      const auto row = index.mask.begin() + static_cast<int64_t>(n) * p.seq_len;
      counts[n] = static_cast<float>(std::count(row, row + p.seq_len, uint8_t{1}));
    }
  }
  return counts;
}

// One call made ready on one device. Thread safety: one thread at a time (PreparedRun).
class CudaMeanPoolingBwdRun : public cuda::CudaRun {
 public:
  CudaMeanPoolingBwdRun(const MeanPoolingProblem& problem, const DeviceInfo& device,
                        DeviceThreadResources* resources)
      : CudaRun(device.ordinal, resources), p_(problem) {}

  // Uploads dout, counts and mask or offsets, and allocates dx.
  absl::Status Init(const TensorMap& inputs) {
    KS_RETURN_IF_ERROR(InitEvents());
    const Tensor& dout = inputs.at("dout");
    KS_ASSIGN_OR_RETURN(dout_, Upload(dout.data(), dout.nbytes()));
    const MeanPoolingIndex index(inputs);
    const std::vector<float> counts = Counts(p_, index);
    KS_ASSIGN_OR_RETURN(counts_, Upload(counts.data(), counts.size() * sizeof(float)));
    args_.dout = dout_.get();
    args_.counts = static_cast<const float*>(counts_.get());
    if (!index.mask.empty()) {
      KS_ASSIGN_OR_RETURN(aux_, Upload(index.mask.data(), index.mask.size()));
      args_.mask = static_cast<const uint8_t*>(aux_.get());
    } else if (!index.cu_seqlens.empty()) {
      const std::vector<int64_t>& offsets = index.cu_seqlens;
      KS_ASSIGN_OR_RETURN(aux_, Upload(offsets.data(), offsets.size() * sizeof(int64_t)));
      args_.cu_seqlens = static_cast<const int64_t*>(aux_.get());
    }
    args_.num_sequences = p_.num_sequences;
    args_.seq_len = p_.seq_len;
    args_.total_rows = p_.total_rows;
    args_.hidden = p_.hidden;
    return AddOutput("dx", p_.dtype, p_.x_shape, &args_.dx);
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    KS_RETURN_IF_ERROR(cuda::CheckPoolingBwdConfig(config, ShapeOf(p_)));
    KS_ASSIGN_OR_RETURN(const LaunchFn launch, SelectLaunch(p_.dtype, VectorWidth(p_)));
    KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal()));
    return TimedLaunch([&](cudaStream_t stream) {
      return launch(args_, config.num_warps, config.block_size, stream);
    });
  }

 private:
  const MeanPoolingProblem p_;
  cuda::PoolingBwdDeviceArgs args_;
  DeviceBuffer dout_, counts_, aux_;
};

// The mean_pooling_bwd kernels as CudaImpl runs them.
struct MeanPoolingBwdCudaTraits {
  using ProblemType = MeanPoolingProblem;
  using Run = CudaMeanPoolingBwdRun;
  static constexpr const char* kLabel = "mean_pooling_bwd";

  static absl::Status Supports(const MeanPoolingProblem& p) {
    return SelectLaunch(p.dtype, 1).status();
  }
  static KernelConfig Heuristic(const MeanPoolingProblem& p, const DeviceInfo& device) {
    return cuda::PoolingBwdHeuristic(ShapeOf(p), device);
  }
  static std::vector<KernelConfig> Candidates(const MeanPoolingProblem& p,
                                              const DeviceInfo& device) {
    return cuda::PoolingBwdCandidates(ShapeOf(p), device);
  }
  static const ConfigSchema& ConfigFields() { return cuda::MeanPoolingBwdCudaConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config, const MeanPoolingProblem& p) {
    return cuda::CheckPoolingBwdConfig(config, ShapeOf(p));
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCuda() {
  return std::make_unique<cuda::CudaImpl<MeanPoolingBwdCudaTraits>>();
}

}  // namespace kernelserve
