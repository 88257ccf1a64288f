#include "kernels/mean_pooling_kernel.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/elide.h"
#include "core/utils/seqlens.h"
#include "core/utils/string_view.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/mean_pooling_impl.h"
#include "kernels/cuda/mean_pooling_config.h"

namespace kernelserve {
namespace {

constexpr int64_t kDefaultChunkSize = 32;
// Below this many elements of x one thread beats starting more (a thread start costs tens of
// microseconds, about what summing this many elements takes).
constexpr int64_t kSingleThreadElements = int64_t{1} << 18;

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

bool IsIndexType(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

absl::Status CheckNames(const TensorSpecMap& inputs, const Attributes& attrs) {
  for (const auto& [name, spec] : inputs) {
    if (name != "x" && name != "mask" && name != "cu_seqlens") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", Elide(name), "': expected x, mask or cu_seqlens"));
    }
  }
  for (const auto& [name, value] : attrs) {
    if (name != "chunk_size") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown attribute '", Elide(name), "': expected chunk_size"));
    }
  }
  if (!inputs.contains("x")) {
    return absl::InvalidArgumentError("missing input 'x': expected f32|f16|bf16 [B,S,H] or [T,H]");
  }
  if (inputs.contains("mask") && inputs.contains("cu_seqlens")) {
    return absl::InvalidArgumentError(
        "inputs 'mask' and 'cu_seqlens' both given: expected at most one of them");
  }
  return absl::OkStatus();
}

// Fills the shape fields of `p` for varlen x [T,H] or [1,T,H] with cu_seqlens [N+1].
absl::Status AnalyzeVarlen(const TensorSpec& x, const TensorSpec& cu, MeanPoolingProblem& p) {
  if (cu.shape.size() != 1 || cu.shape[0] < 1) {
    return Invalid("cu_seqlens", absl::StrCat("expected rank 1 [N+1] with N+1 >= 1, got ",
                                              ShapeString(cu.shape)));
  }
  if (!IsIndexType(cu.dtype)) {
    return Invalid("cu_seqlens",
                   absl::StrCat("expected dtype i32 or i64, got ", Sv(DTypeName(cu.dtype))));
  }
  const bool rank2 = x.shape.size() == 2;
  if (!rank2 && !(x.shape.size() == 3 && x.shape[0] == 1)) {
    return Invalid(
        "x", absl::StrCat("with cu_seqlens expected [T,H] or [1,T,H], got ", ShapeString(x.shape)));
  }
  p.form = MeanPoolingProblem::Form::kVarlen;
  p.num_sequences = cu.shape[0] - 1;
  p.total_rows = rank2 ? x.shape[0] : x.shape[1];
  p.hidden = rank2 ? x.shape[1] : x.shape[2];
  return absl::OkStatus();
}

int HardwareThreads(const DeviceInfo& device) {
  return std::clamp(device.num_threads, 1, cpu::kMaxCpuThreads);
}

// chunk_size as a CPU block_size: larger chunks than the kernel's limit split the same way.
int CpuBlockRows(int64_t chunk_size) {
  return static_cast<int>(std::min<int64_t>(chunk_size, cpu::kMaxCpuBlockRows));
}

KernelConfig CpuConfig(int block_size, int threads) {
  KernelConfig config;
  config.block_size = block_size;
  config.num_warps = threads;
  config.platform = "cpu";
  return config;
}

cuda::MeanPoolingShape CudaShape(const MeanPoolingProblem& p) {
  cuda::MeanPoolingShape shape;
  switch (p.form) {
    case MeanPoolingProblem::Form::kDense:
      shape.form = cuda::MeanPoolingShape::Form::kDense;
      break;
    case MeanPoolingProblem::Form::kMasked:
      shape.form = cuda::MeanPoolingShape::Form::kMasked;
      break;
    case MeanPoolingProblem::Form::kVarlen:
      shape.form = cuda::MeanPoolingShape::Form::kVarlen;
      break;
  }
  shape.dtype = p.dtype;
  shape.num_sequences = p.num_sequences;
  shape.total_rows = p.total_rows;
  shape.hidden = p.hidden;
  return shape;
}

// The problem for config choice; a default one when the inputs are invalid (a REQUIRES
// violation: the configs are then only well-formed, not meaningful).
MeanPoolingProblem ProblemOrDefault(const TensorSpecMap& inputs, const Attributes& attrs) {
  absl::StatusOr<MeanPoolingProblem> p = AnalyzeMeanPooling(inputs, attrs);
  return p.ok() ? *p : MeanPoolingProblem{};
}

}  // namespace

absl::StatusOr<MeanPoolingProblem> AnalyzeMeanPooling(const TensorSpecMap& inputs,
                                                      const Attributes& attrs) {
  KS_RETURN_IF_ERROR(CheckNames(inputs, attrs));
  MeanPoolingProblem p;
  KS_ASSIGN_OR_RETURN(p.chunk_size, GetIntAttr(attrs, "chunk_size", kDefaultChunkSize));
  if (p.chunk_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'chunk_size' = ", p.chunk_size, ": expected > 0"));
  }
  const TensorSpec& x = inputs.at("x");
  if (!IsFloating(x.dtype)) {
    return Invalid("x",
                   absl::StrCat("expected dtype f32, f16 or bf16, got ", Sv(DTypeName(x.dtype))));
  }
  p.dtype = x.dtype;
  if (auto cu = inputs.find("cu_seqlens"); cu != inputs.end()) {
    KS_RETURN_IF_ERROR(AnalyzeVarlen(x, cu->second, p));
    return p;
  }
  if (x.shape.size() != 3) {
    return Invalid("x", absl::StrCat("expected rank 3 [B,S,H], got ", ShapeString(x.shape)));
  }
  p.num_sequences = x.shape[0];
  p.seq_len = x.shape[1];
  p.total_rows = x.shape[0] * x.shape[1];
  p.hidden = x.shape[2];
  if (auto mask = inputs.find("mask"); mask != inputs.end()) {
    const TensorSpec& m = mask->second;
    if (m.dtype != DType::kBool && !IsIndexType(m.dtype)) {
      return Invalid("mask",
                     absl::StrCat("expected dtype bool, i32 or i64, got ", Sv(DTypeName(m.dtype))));
    }
    if (m.shape != Shape{p.num_sequences, p.seq_len}) {
      return Invalid(
          "mask", absl::StrCat("expected shape [B,S] = ", ShapeString({p.num_sequences, p.seq_len}),
                               ", got ", ShapeString(m.shape)));
    }
    p.form = MeanPoolingProblem::Form::kMasked;
  }
  return p;
}

std::vector<ArgDoc> MeanPoolingKernel::input_docs() const {
  return {{"x", true, "f32|f16|bf16 [B,S,H], or [T,H] / [1,T,H] with cu_seqlens"},
          {"mask", false, "bool|i32|i64 [B,S]; nonzero rows are averaged"},
          {"cu_seqlens", false, "i32|i64 [N+1]; sequence n is rows cu[n]..cu[n+1] of x"}};
}

std::vector<ArgDoc> MeanPoolingKernel::output_docs() const {
  return {{"out", true, "dtype of x [B,H] (varlen: [N,H]); zeros for an empty sequence"}};
}

std::vector<ArgDoc> MeanPoolingKernel::attribute_docs() const {
  return {{"chunk_size", false, "int > 0, default 32: rows per work item; never changes results"}};
}

absl::Status MeanPoolingKernel::Validate(const TensorSpecMap& inputs,
                                         const Attributes& attrs) const {
  return AnalyzeMeanPooling(inputs, attrs).status();
}

absl::Status MeanPoolingKernel::ValidateData(const TensorMap& inputs,
                                             const Attributes& attrs) const {
  auto cu = inputs.find("cu_seqlens");
  if (cu == inputs.end()) return absl::OkStatus();
  KS_ASSIGN_OR_RETURN(const MeanPoolingProblem p, AnalyzeMeanPooling(SpecsOf(inputs), attrs));
  const absl::Status status = ValidateCuSeqlens(cu->second, p.total_rows);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("input 'cu_seqlens' (x has ", p.total_rows, " rows): ", status.message()));
}

TensorSpecMap MeanPoolingKernel::OutputSpecs(const TensorSpecMap& inputs,
                                             const Attributes& attrs) const {
  absl::StatusOr<MeanPoolingProblem> p = AnalyzeMeanPooling(inputs, attrs);
  if (!p.ok()) return {};
  return {{"out", TensorSpec{p->dtype, {p->num_sequences, p->hidden}}}};
}

KernelConfig MeanPoolingKernel::HeuristicConfig(const TensorSpecMap& inputs,
                                                const Attributes& attrs,
                                                const DeviceInfo& device) const {
  const MeanPoolingProblem p = ProblemOrDefault(inputs, attrs);
  switch (device.platform) {
    case Platform::kCpu: {
      // The caller's chunk_size is the work split; threads only pay off once the sum is big
      // enough to hide their start-up.
      const int64_t elements = p.total_rows * p.hidden;
      const int threads = elements < kSingleThreadElements ? 1 : HardwareThreads(device);
      return CpuConfig(CpuBlockRows(p.chunk_size), threads);
    }
    case Platform::kCuda:
      return cuda::MeanPoolingHeuristic(CudaShape(p), device);
    default:
      return KernelConfig{};
  }
}

std::vector<KernelConfig> MeanPoolingKernel::CandidateConfigs(const TensorSpecMap& inputs,
                                                              const Attributes& attrs,
                                                              const DeviceInfo& device) const {
  const MeanPoolingProblem p = ProblemOrDefault(inputs, attrs);
  switch (device.platform) {
    case Platform::kCpu: {
      const std::set<int> block_sizes = {CpuBlockRows(p.chunk_size), 32, 128, 512};
      const std::set<int> threads = {1, 2, HardwareThreads(device)};
      std::vector<KernelConfig> configs;
      for (int block_size : block_sizes) {
        for (int t : threads) configs.push_back(CpuConfig(block_size, t));
      }
      return configs;
    }
    case Platform::kCuda:
      return cuda::MeanPoolingCandidates(CudaShape(p), device);
    default:
      return {};
  }
}

std::unique_ptr<Kernel> MakeMeanPoolingKernel() {
  auto kernel = std::make_unique<MeanPoolingKernel>();
  kernel->AddImpl(std::make_unique<cpu::MeanPoolingCpuImpl>());
  return kernel;
}

}  // namespace kernelserve
