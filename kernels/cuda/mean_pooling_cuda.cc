// The CUDA PlatformImpl of mean pooling: MakeCudaMeanPooling.
#include "kernels/cuda/mean_pooling_cuda.h"

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
#include "kernels/cuda/mean_pooling_config.h"
#include "kernels/cuda/mean_pooling_dispatch.h"
#include "kernels/cuda/mean_pooling_space.h"

namespace kernelserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceThreadResources;
using cuda::PoolingForm;

// What the launch needs to know of the inputs' specs (already validated by the kernel).
struct PoolingSpec {
  PoolingForm form = PoolingForm::kDense;
  DType dtype = DType::kF32;
  int64_t num_sequences = 0;
  int64_t seq_len = 0;
  int64_t total_rows = 0;  // rows of x
  int64_t hidden = 0;
};

absl::StatusOr<PoolingSpec> DescribeInputs(const TensorSpecMap& inputs) {
  auto x = inputs.find("x");
  if (x == inputs.end()) return absl::InvalidArgumentError("missing input 'x'");
  const Shape& shape = x->second.shape;
  PoolingSpec spec;
  spec.dtype = x->second.dtype;
  if (!IsFloating(spec.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'x': expected f32, f16 or bf16, got ", Sv(DTypeName(spec.dtype))));
  }
  if (auto cu = inputs.find("cu_seqlens"); cu != inputs.end()) {
    const bool rank2 = shape.size() == 2;
    if ((!rank2 && shape.size() != 3) || cu->second.shape.size() != 1) {
      return absl::InvalidArgumentError(
          "varlen mean pooling: expected x [T,H] or [1,T,H] and "
          "cu_seqlens [N+1]");
    }
    spec.form = PoolingForm::kVarlen;
    spec.num_sequences = cu->second.shape[0] - 1;
    spec.total_rows = rank2 ? shape[0] : shape[1];
    spec.hidden = rank2 ? shape[1] : shape[2];
    return spec;
  }
  if (shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'x': expected rank 3 [B,S,H], got ", ShapeString(shape)));
  }
  spec.form = inputs.contains("mask") ? PoolingForm::kMasked : PoolingForm::kDense;
  spec.num_sequences = shape[0];
  spec.seq_len = shape[1];
  spec.total_rows = shape[0] * shape[1];
  spec.hidden = shape[2];
  return spec;
}

cuda::PoolingLaunchShape LaunchShapeOf(const KernelConfig& config) {
  return {config.num_warps * 32, config.block_d, config.block_size};
}

int VectorWidth(const PoolingSpec& spec) {
  return cuda::PoolVectorWidth(static_cast<int64_t>(ItemSize(spec.dtype)), spec.hidden);
}

// InvalidArgument unless `config` is compiled and its grid fits the launch limits.
absl::Status CheckPoolingConfig(const KernelConfig& config, const PoolingSpec& spec,
                                const cuda::PoolingDeviceArgs& args) {
  if (!cuda::IsPoolingConfigCompiled(config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mean pooling (cuda): config is not compiled: ",
                     ExplainNotAmong(config, cuda::MeanPoolingCompiledConfigs())));
  }
  const cuda::PoolingPlan plan =
      cuda::PlanMeanPooling(args, LaunchShapeOf(config), VectorWidth(spec));
  if (plan.tiles > cuda::kPoolMaxTiles || plan.chunks > cuda::kPoolMaxChunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean pooling (cuda): config {", config.DebugString(), "} needs a grid of ", plan.chunks,
        "x", plan.tiles, " blocks; at most ", cuda::kPoolMaxChunks, "x", cuda::kPoolMaxTiles));
  }
  return absl::OkStatus();
}

// Mask values as bytes (nonzero -> 1), whatever the mask's dtype.
std::vector<uint8_t> MaskBytes(const Tensor& mask) {
  std::vector<uint8_t> bytes(static_cast<size_t>(mask.numel()));
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = mask.GetInt(static_cast<int64_t>(i)) != 0 ? 1 : 0;
  }
  return bytes;
}

// One call made ready on one device. Thread safety: one thread at a time (PreparedRun).
class CudaMeanPoolingRun : public PreparedRun {
 public:
  CudaMeanPoolingRun(const PoolingSpec& spec, int ordinal, cudaStream_t stream)
      : spec_(spec), ordinal_(ordinal), stream_(stream) {}
  ~CudaMeanPoolingRun() override {
    // Errors cannot be reported from a destructor.
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
  }

  // Allocates the device buffers and uploads `inputs` through `res`'s staging buffer.
  absl::Status Init(const TensorMap& inputs, DeviceThreadResources& res);

  absl::StatusOr<double> Launch(const KernelConfig& config) override;
  absl::StatusOr<TensorMap> Fetch() override;
  double upload_seconds() const override { return upload_seconds_; }

  // See PoisonMeanPoolingOutputs.
  absl::Status Poison() {
    if (out_.size() == 0) return absl::OkStatus();
    KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out_.get(), 0xff, out_.size(), stream_));
    KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  absl::Status Upload(const void* host, size_t bytes, DeviceThreadResources& res,
                      DeviceBuffer& dst) {
    KS_ASSIGN_OR_RETURN(dst, DeviceBuffer::Allocate(ordinal_, bytes, stream_));
    return res.Upload(host, bytes, dst.get(), stream_);
  }
  // Grows the workspace to the plan's size and zeroes its counters where needed.
  absl::Status PrepareWorkspace(const cuda::PoolingPlan& plan);

  const PoolingSpec spec_;
  const int ordinal_;
  const cudaStream_t stream_;
  cuda::PoolingDeviceArgs args_;
  DeviceBuffer x_, mask_, cu_seqlens_, out_, workspace_;
  size_t zeroed_bytes_ = 0;  // leading bytes of the workspace known to be zero
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  bool launched_ = false;
  double upload_seconds_ = 0.0;
};

absl::Status CudaMeanPoolingRun::Init(const TensorMap& inputs, DeviceThreadResources& res) {
  const auto started = std::chrono::steady_clock::now();
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
  const Tensor& x = inputs.at("x");
  KS_RETURN_IF_ERROR(Upload(x.data(), x.nbytes(), res, x_));
  args_.x = x_.get();
  args_.num_sequences = spec_.num_sequences;
  args_.seq_len = spec_.seq_len;
  args_.hidden = spec_.hidden;
  args_.used_rows = spec_.total_rows;
  if (spec_.form == PoolingForm::kMasked) {
    const std::vector<uint8_t> mask = MaskBytes(inputs.at("mask"));
    KS_RETURN_IF_ERROR(Upload(mask.data(), mask.size(), res, mask_));
    args_.mask = static_cast<const uint8_t*>(mask_.get());
  } else if (spec_.form == PoolingForm::kVarlen) {
    const std::vector<int64_t> offsets = inputs.at("cu_seqlens").ToInts();
    KS_RETURN_IF_ERROR(Upload(offsets.data(), offsets.size() * sizeof(int64_t), res, cu_seqlens_));
    args_.cu_seqlens = static_cast<const int64_t*>(cu_seqlens_.get());
    args_.used_rows = offsets.back();
  }
  const size_t out_bytes =
      static_cast<size_t>(spec_.num_sequences * spec_.hidden) * ItemSize(spec_.dtype);
  KS_ASSIGN_OR_RETURN(out_, DeviceBuffer::Allocate(ordinal_, out_bytes, stream_));
  args_.out = out_.get();
  upload_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return absl::OkStatus();
}

absl::Status CudaMeanPoolingRun::PrepareWorkspace(const cuda::PoolingPlan& plan) {
  if (workspace_.size() < plan.workspace_bytes) {
    workspace_ = DeviceBuffer();  // give the old one back to the pool first
    KS_ASSIGN_OR_RETURN(workspace_,
                        DeviceBuffer::Allocate(ordinal_, plan.workspace_bytes, stream_));
    zeroed_bytes_ = 0;
  }
  if (zeroed_bytes_ < plan.counters_bytes) {
    KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(workspace_.get(), 0, plan.counters_bytes, stream_));
    zeroed_bytes_ = plan.counters_bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaMeanPoolingRun::Launch(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckPoolingConfig(config, spec_, args_));
  const int vec = VectorWidth(spec_);
  KS_ASSIGN_OR_RETURN(const cuda::PoolingLaunchFn launch,
                      cuda::SelectPoolingLaunch(spec_.dtype, spec_.form, vec, config.num_stages));
  const cuda::PoolingLaunchShape shape = LaunchShapeOf(config);
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  KS_RETURN_IF_ERROR(PrepareWorkspace(cuda::PlanMeanPooling(args_, shape, vec)));
  launched_ = false;
  // A launch that fails part way may leave counters set: zero them before the next one.
  zeroed_bytes_ = 0;
  KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_));
  KS_CUDA_RETURN_IF_ERROR(launch(args_, shape, workspace_.get(), stream_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
  float ms = 0.0f;
  KS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
  zeroed_bytes_ = cuda::PlanMeanPooling(args_, shape, vec).counters_bytes;
  launched_ = true;
  return static_cast<double>(ms) * 1e-3;
}

absl::StatusOr<TensorMap> CudaMeanPoolingRun::Fetch() {
  if (!launched_) {
    return absl::FailedPreconditionError("mean pooling (cuda): Fetch before a successful Launch");
  }
  KS_ASSIGN_OR_RETURN(DeviceThreadResources * res, cuda::ThisThreadResources(ordinal_));
  Tensor out = Tensor::Empty(spec_.dtype, {spec_.num_sequences, spec_.hidden});
  KS_RETURN_IF_ERROR(res->Download(out_.get(), out.nbytes(), out.data(), stream_));
  TensorMap outputs;
  outputs.emplace("out", std::move(out));
  return outputs;
}

// Thread safety: stateless; every call is independent.
class CudaMeanPoolingImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCuda; }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                       const Attributes& /*attrs*/,
                                                       const DeviceInfo& device) override {
    if (device.platform != Platform::kCuda || device.ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mean pooling (cuda): expected a CUDA device, got ",
                       Sv(PlatformName(device.platform)), " ordinal ", device.ordinal));
    }
    KS_ASSIGN_OR_RETURN(const PoolingSpec spec, DescribeInputs(SpecsOf(inputs)));
    KS_ASSIGN_OR_RETURN(DeviceThreadResources * res, cuda::ThisThreadResources(device.ordinal));
    auto run = std::make_unique<CudaMeanPoolingRun>(spec, device.ordinal, res->stream());
    KS_RETURN_IF_ERROR(run->Init(inputs, *res));
    return std::unique_ptr<PreparedRun>(std::move(run));
  }

  absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap& inputs,
                           const DeviceInfo& device) const override {
    if (device.platform != Platform::kCuda) {
      return absl::InvalidArgumentError("mean pooling (cuda): the device is not a CUDA GPU");
    }
    KS_ASSIGN_OR_RETURN(const PoolingSpec spec, DescribeInputs(inputs));
    cuda::PoolingDeviceArgs args;  // sizes only; varlen counts every row of x
    args.num_sequences = spec.num_sequences;
    args.used_rows = spec.total_rows;
    args.hidden = spec.hidden;
    KS_RETURN_IF_ERROR(CheckPoolingConfig(config, spec, args));
    return cuda::SelectPoolingLaunch(spec.dtype, spec.form, VectorWidth(spec), config.num_stages)
        .status();
  }
};

}  // namespace

namespace cuda {

absl::Status PoisonMeanPoolingOutputs(PreparedRun& run) {
  auto* cuda_run = dynamic_cast<CudaMeanPoolingRun*>(&run);
  if (cuda_run == nullptr) {
    return absl::InvalidArgumentError("PoisonMeanPoolingOutputs: not a CUDA mean pooling run");
  }
  return cuda_run->Poison();
}

}  // namespace cuda

std::unique_ptr<PlatformImpl> MakeCudaMeanPooling() {
  return std::make_unique<CudaMeanPoolingImpl>();
}

}  // namespace kernelserve
