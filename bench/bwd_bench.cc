#include "bench/bwd_bench.h"

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/random_tensor.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/flash_attention.h"

namespace kernelserve::bench {
namespace {

absl::StatusOr<double> TimeConfig(PreparedRun& run, const KernelConfig& config, int iters) {
  for (int i = 0; i < 3; ++i) KS_RETURN_IF_ERROR(run.Launch(config).status());
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    KS_ASSIGN_OR_RETURN(const double seconds, run.Launch(config));
    us.push_back(seconds * 1e6);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

PoolingBwdCase DenseCase(DType dtype, int64_t b, int64_t s, int64_t h, uint64_t seed) {
  PoolingBwdCase c;
  c.name = absl::StrCat("dense ", Sv(DTypeName(dtype)), " [", b, ",", s, ",", h, "]");
  c.inputs = {{"x", Tensor::ShapeOnly(dtype, {b, s, h})},
              {"dout", RandomTensor(dtype, {b, h}, seed)}};
  c.dx_bytes = b * s * h * static_cast<int64_t>(ItemSize(dtype));
  return c;
}

}  // namespace

absl::StatusOr<KernelTiming> TimeKernel(const Kernel& kernel, const TensorMap& inputs,
                                        const Attributes& params, const DeviceInfo& device,
                                        int iters, bool tune) {
  KS_ASSIGN_OR_RETURN(const Attributes attrs, kernel.schema().CanonicalParams(params));
  KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem,
                      kernel.Analyze(SpecsOf(inputs), attrs));
  KS_RETURN_IF_ERROR(kernel.schema().CheckInputData(inputs));
  KS_RETURN_IF_ERROR(kernel.ValidateData(*problem, inputs));
  const PlatformImpl* cuda = kernel.GpuAuto();  // the own kernels and cuDNN's plans where both
  if (cuda == nullptr) return absl::UnimplementedError(kernel.name() + " has no GPU platform");
  KS_RETURN_IF_ERROR(cuda->Supports(*problem, device));
  KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, cuda->Prepare(*problem, inputs, device));
  KernelTiming result;
  result.heuristic.config = cuda->Heuristic(*problem, device);
  KS_ASSIGN_OR_RETURN(result.heuristic.median_us, TimeConfig(*run, result.heuristic.config, iters));
  result.tuned = result.heuristic;
  if (!tune) return result;
  for (const KernelConfig& config : cuda->Candidates(*problem, device)) {
    ++result.candidates;
    KS_ASSIGN_OR_RETURN(const double us, TimeConfig(*run, config, iters));
    result.each.push_back({config, us});
    if (us < result.tuned.median_us) result.tuned = {config, us};
  }
  return result;
}

std::vector<PoolingBwdCase> PoolingBwdCases(uint64_t seed) {
  std::vector<PoolingBwdCase> cases;
  cases.push_back(DenseCase(DType::kBF16, 32, 2048, 4096, seed));
  cases.push_back(DenseCase(DType::kF32, 32, 2048, 4096, seed + 1));
  cases.push_back(DenseCase(DType::kBF16, 64, 512, 1024, seed + 2));
  std::mt19937_64 rng(seed);
  {
    PoolingBwdCase c = DenseCase(DType::kBF16, 32, 2048, 4096, seed + 3);
    c.name = "masked bf16 [32,2048,4096]";
    std::vector<int64_t> mask(32 * 2048, 0);
    for (int64_t b = 0; b < 32; ++b) {
      const int64_t counted = 512 + static_cast<int64_t>(rng() % 1537);  // [S/4, S]
      std::fill_n(mask.begin() + b * 2048, counted, 1);
    }
    c.inputs["mask"] = Tensor::FromInts(DType::kBool, {32, 2048}, mask);
    cases.push_back(std::move(c));
  }
  {
    std::vector<int64_t> offsets = {0};
    for (int n = 0; n < 256; ++n) offsets.push_back(offsets.back() + 1 + rng() % 4096);
    const int64_t rows = offsets.back();
    PoolingBwdCase c;
    c.name = absl::StrCat("varlen bf16 256 seqs, ", rows, " rows, H=4096");
    c.inputs = {{"x", Tensor::ShapeOnly(DType::kBF16, {rows, 4096})},
                {"dout", RandomTensor(DType::kBF16, {256, 4096}, seed + 4)},
                {"cu_seqlens", Tensor::FromInts(DType::kI32, {257}, offsets)}};
    c.dx_bytes = rows * 4096 * 2;
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<AttentionCase> AttentionBwdCases(uint64_t seed) {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : DefaultAttentionCases(seed)) {
    if (c.lengths.empty() && c.option.empty() && (c.head_dim == 64 || c.head_dim == 128)) {
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<AttentionCase> AttentionDbiasCases() {
  std::vector<AttentionCase> cases;
  for (bool causal : {false, true}) {
    AttentionCase c;
    c.batch = 2;
    c.seq_len = 2048;
    c.heads_q = c.heads_kv = 16;
    c.head_dim = 128;
    c.causal = causal;
    c.name = absl::StrCat("bf16 D=128 [2,2048] Hq=16", causal ? " causal" : "", " bias [1,16,..]");
    cases.push_back(c);
  }
  return cases;
}

double AttentionBwdFlops(const AttentionCase& c) { return 2.5 * AttentionFlops(c); }

absl::StatusOr<TensorMap> AttentionBwdInputs(const AttentionCase& c, const DeviceInfo& device,
                                             bool bias) {
  const int64_t b = c.batch, s = c.seq_len, d = c.head_dim;
  TensorMap inputs = {{"q", RandomTensor(c.dtype, {b, s, c.heads_q, d}, 21)},
                      {"k", RandomTensor(c.dtype, {b, s, c.heads_kv, d}, 22)},
                      {"v", RandomTensor(c.dtype, {b, s, c.heads_kv, d}, 23)}};
  if (bias) inputs["bias"] = RandomTensor(DType::kF32, {1, c.heads_q, s, s}, 25);
  std::unique_ptr<Kernel> forward = MakeFlashAttention();
  KS_ASSIGN_OR_RETURN(const Attributes attrs, forward->schema().CanonicalParams(
                                                  {{"causal", c.causal}, {"return_lse", true}}));
  KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem,
                      forward->Analyze(SpecsOf(inputs), attrs));
  const PlatformImpl* cuda = forward->GpuAuto();
  if (cuda == nullptr) return absl::UnimplementedError("flash_attention has no GPU platform");
  KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, cuda->Prepare(*problem, inputs, device));
  KS_RETURN_IF_ERROR(run->Launch(cuda->Heuristic(*problem, device)).status());
  KS_ASSIGN_OR_RETURN(TensorMap outputs, run->Fetch());
  inputs["out"] = std::move(outputs.at("out"));
  inputs["lse"] = std::move(outputs.at("lse"));
  inputs["dout"] = RandomTensor(c.dtype, {b, s, c.heads_q, d}, 24);
  return inputs;
}

}  // namespace kernelserve::bench
