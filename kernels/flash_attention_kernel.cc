#include "kernels/flash_attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/elide.h"
#include "core/utils/seqlens.h"
#include "core/utils/string_view.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/flash_attention_impl.h"
#include "kernels/cuda/flash_attention_config.h"

namespace kernelserve {
namespace {

constexpr int64_t kMaxHeadDim = 256;
// Below this many multiply-adds (about a millisecond of one core) one thread beats several.
constexpr double kSingleThreadMacs = 4194304.0;  // 2^22

const std::set<std::string> kInputNames = {
    "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "bias"};
const std::set<std::string> kAttributeNames = {"causal",       "softmax_scale",   "window_left",
                                               "window_right", "logits_soft_cap", "return_lse"};

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

bool IsIndexType(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

// q, k or v as [batch, seq, heads, dim]; varlen tensors have batch 1 and seq = T.
struct HeadRows {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t dim = 0;
};

absl::StatusOr<HeadRows> ReadHeadRows(const std::string& name, const TensorSpec& spec,
                                      bool varlen) {
  const Shape& s = spec.shape;
  const char* seq = name == "q" ? "q" : "k";
  const char* heads = name == "q" ? "Hq" : "Hkv";
  if (!varlen) {
    if (s.size() != 4) {
      return Invalid(
          name, absl::StrCat("expected rank 4 [B,S", seq, ",", heads, ",D], got ", ShapeString(s)));
    }
    return HeadRows{s[0], s[1], s[2], s[3]};
  }
  if (s.size() == 3) return HeadRows{1, s[0], s[1], s[2]};
  if (s.size() == 4 && s[0] == 1) return HeadRows{1, s[1], s[2], s[3]};
  return Invalid(name, absl::StrCat("with cu_seqlens expected [T", seq, ",", heads, ",D] or [1,T",
                                    seq, ",", heads, ",D], got ", ShapeString(s)));
}

absl::Status CheckNames(const TensorSpecMap& inputs, const Attributes& attrs) {
  for (const auto& [name, spec] : inputs) {
    if (!kInputNames.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown input '", Elide(name),
          "': expected q, k, v, cu_seqlens_q, cu_seqlens_k, q_segment_ids, kv_segment_ids or "
          "bias"));
    }
  }
  for (const auto& [name, value] : attrs) {
    if (!kAttributeNames.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown attribute '", Elide(name),
          "': expected causal, softmax_scale, window_left, window_right, logits_soft_cap or "
          "return_lse"));
    }
  }
  for (const char* name : {"q", "k", "v"}) {
    if (!inputs.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input '", name, "': expected f32|f16|bf16 [B,S,H,D]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDtypes(const TensorSpecMap& inputs) {
  const DType dtype = inputs.at("q").dtype;
  if (!IsFloating(dtype)) {
    return Invalid("q",
                   absl::StrCat("expected dtype f32, f16 or bf16, got ", Sv(DTypeName(dtype))));
  }
  for (const char* name : {"k", "v"}) {
    const DType other = inputs.at(name).dtype;
    if (other != dtype) {
      return Invalid(name, absl::StrCat("dtype ", Sv(DTypeName(other)), " differs from q's ",
                                        Sv(DTypeName(dtype)), ": expected all three the same"));
    }
  }
  return absl::OkStatus();
}

// Fills the shape fields of `p` from q, k and v.
absl::Status AnalyzeQkv(const TensorSpecMap& inputs, FlashAttentionProblem& p) {
  KS_ASSIGN_OR_RETURN(const HeadRows q, ReadHeadRows("q", inputs.at("q"), p.varlen));
  KS_ASSIGN_OR_RETURN(const HeadRows k, ReadHeadRows("k", inputs.at("k"), p.varlen));
  if (inputs.at("v").shape != inputs.at("k").shape) {
    return Invalid("v",
                   absl::StrCat("expected the shape of k ", ShapeString(inputs.at("k").shape),
                                " (same Sk, Hkv, D), got ", ShapeString(inputs.at("v").shape)));
  }
  if (q.dim < 1 || q.dim > kMaxHeadDim) {
    return Invalid("q", absl::StrCat("head dim D = ", q.dim, ": expected 1 <= D <= ", kMaxHeadDim));
  }
  if (k.dim != q.dim) {
    return Invalid("k", absl::StrCat("head dim ", k.dim, " differs from q's ", q.dim));
  }
  if (q.heads < 1 || k.heads < 1 || q.heads % k.heads != 0) {
    return Invalid("k", absl::StrCat("q has ", q.heads, " heads, k has ", k.heads,
                                     ": Hq must be a multiple of Hkv (both >= 1)"));
  }
  if (!p.varlen && k.batch != q.batch) {
    return Invalid("k", absl::StrCat("batch ", k.batch, " differs from q's ", q.batch));
  }
  p.num_heads_q = q.heads;
  p.num_heads_kv = k.heads;
  p.head_dim = q.dim;
  p.total_q = q.batch * q.seq;
  p.total_k = k.batch * k.seq;
  if (!p.varlen) {
    p.num_sequences = q.batch;
    p.seq_len_q = q.seq;
    p.seq_len_k = k.seq;
  }
  return absl::OkStatus();
}

absl::Status AnalyzeCuSeqlens(const TensorSpecMap& inputs, FlashAttentionProblem& p) {
  for (const char* name : {"cu_seqlens_q", "cu_seqlens_k"}) {
    const TensorSpec& cu = inputs.at(name);
    if (cu.shape.size() != 1 || cu.shape[0] < 1) {
      return Invalid(
          name, absl::StrCat("expected rank 1 [N+1] with N+1 >= 1, got ", ShapeString(cu.shape)));
    }
    if (!IsIndexType(cu.dtype)) {
      return Invalid(name,
                     absl::StrCat("expected dtype i32 or i64, got ", Sv(DTypeName(cu.dtype))));
    }
  }
  const int64_t nq = inputs.at("cu_seqlens_q").shape[0];
  const int64_t nk = inputs.at("cu_seqlens_k").shape[0];
  if (nq != nk) {
    return Invalid("cu_seqlens_k", absl::StrCat("has ", nk, " entries, cu_seqlens_q has ", nq,
                                                ": expected the same N+1"));
  }
  p.num_sequences = nq - 1;
  return absl::OkStatus();
}

absl::Status AnalyzeBias(const TensorSpec& bias, FlashAttentionProblem& p) {
  if (p.varlen) return Invalid("bias", "not supported with cu_seqlens: expected the dense form");
  if (bias.dtype != DType::kF32) {
    return Invalid("bias", absl::StrCat("expected dtype f32, got ", Sv(DTypeName(bias.dtype))));
  }
  const Shape& s = bias.shape;
  const bool ok = s.size() == 4 && (s[0] == p.num_sequences || s[0] == 1) &&
                  (s[1] == p.num_heads_q || s[1] == 1) && s[2] == p.seq_len_q &&
                  s[3] == p.seq_len_k;
  if (!ok) {
    return Invalid("bias", absl::StrCat("expected [B or 1, Hq or 1, Sq, Sk] = [", p.num_sequences,
                                        " or 1,", p.num_heads_q, " or 1,", p.seq_len_q, ",",
                                        p.seq_len_k, "], got ", ShapeString(s)));
  }
  p.has_bias = true;
  p.bias_batch = s[0];
  p.bias_heads = s[1];
  return absl::OkStatus();
}

absl::Status AnalyzeSegmentIds(const TensorSpecMap& inputs, FlashAttentionProblem& p) {
  const bool has_q = inputs.contains("q_segment_ids");
  const bool has_kv = inputs.contains("kv_segment_ids");
  if (!has_q && !has_kv) return absl::OkStatus();
  if (has_q != has_kv) {
    return Invalid(has_q ? "q_segment_ids" : "kv_segment_ids",
                   "given alone: expected q_segment_ids and kv_segment_ids together");
  }
  for (const char* name : {"q_segment_ids", "kv_segment_ids"}) {
    if (p.varlen) return Invalid(name, "not supported with cu_seqlens: expected the dense form");
    const TensorSpec& ids = inputs.at(name);
    if (!IsIndexType(ids.dtype)) {
      return Invalid(name,
                     absl::StrCat("expected dtype i32 or i64, got ", Sv(DTypeName(ids.dtype))));
    }
    const bool is_q = std::string(name) == "q_segment_ids";
    const Shape expected = {p.num_sequences, is_q ? p.seq_len_q : p.seq_len_k};
    if (ids.shape != expected) {
      return Invalid(name, absl::StrCat("expected [B,", is_q ? "Sq" : "Sk", "] = ",
                                        ShapeString(expected), ", got ", ShapeString(ids.shape)));
    }
  }
  p.has_segment_ids = true;
  return absl::OkStatus();
}

absl::Status Nonnegative(const std::string& name, double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' = ", value, ": expected a finite value >= 0"));
}

absl::Status AnalyzeAttributes(const Attributes& attrs, FlashAttentionProblem& p) {
  KS_ASSIGN_OR_RETURN(p.causal, GetBoolAttr(attrs, "causal", false));
  KS_ASSIGN_OR_RETURN(p.return_lse, GetBoolAttr(attrs, "return_lse", false));
  KS_ASSIGN_OR_RETURN(const double scale, GetDoubleAttr(attrs, "softmax_scale", 0.0));
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'softmax_scale' = ", scale, ": expected a finite value"));
  }
  p.softmax_scale = scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  KS_ASSIGN_OR_RETURN(p.logits_soft_cap, GetDoubleAttr(attrs, "logits_soft_cap", 0.0));
  KS_RETURN_IF_ERROR(Nonnegative("logits_soft_cap", p.logits_soft_cap));
  for (const char* name : {"window_left", "window_right"}) {
    KS_ASSIGN_OR_RETURN(const std::optional<int64_t> window, GetOptionalIntAttr(attrs, name));
    if (window.has_value() && *window < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute '", name, "' = ", *window, ": expected >= 0 (leave it out for unlimited)"));
    }
    (std::string(name) == "window_left" ? p.window_left : p.window_right) = window.value_or(-1);
  }
  return absl::OkStatus();
}

int HardwareThreads(const DeviceInfo& device) {
  return std::clamp(device.num_threads, 1, cpu::kMaxCpuThreads);
}

KernelConfig CpuConfig(int block_q, int block_k, int threads) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.num_warps = threads;
  config.platform = "cpu";
  return config;
}

// The problem for config choice; a default one when the inputs are invalid (a REQUIRES
// violation: the configs are then only well-formed, not meaningful).
FlashAttentionProblem ProblemOrDefault(const TensorSpecMap& inputs, const Attributes& attrs) {
  absl::StatusOr<FlashAttentionProblem> p = AnalyzeFlashAttention(inputs, attrs);
  return p.ok() ? *p : FlashAttentionProblem{};
}

}  // namespace

absl::StatusOr<FlashAttentionProblem> AnalyzeFlashAttention(const TensorSpecMap& inputs,
                                                            const Attributes& attrs) {
  KS_RETURN_IF_ERROR(CheckNames(inputs, attrs));
  KS_RETURN_IF_ERROR(CheckDtypes(inputs));
  FlashAttentionProblem p;
  p.dtype = inputs.at("q").dtype;
  const bool has_cu_q = inputs.contains("cu_seqlens_q");
  const bool has_cu_k = inputs.contains("cu_seqlens_k");
  if (has_cu_q != has_cu_k) {
    return Invalid(has_cu_q ? "cu_seqlens_q" : "cu_seqlens_k",
                   "given alone: expected cu_seqlens_q and cu_seqlens_k together");
  }
  p.varlen = has_cu_q;
  KS_RETURN_IF_ERROR(AnalyzeQkv(inputs, p));
  if (p.varlen) KS_RETURN_IF_ERROR(AnalyzeCuSeqlens(inputs, p));
  if (auto bias = inputs.find("bias"); bias != inputs.end()) {
    KS_RETURN_IF_ERROR(AnalyzeBias(bias->second, p));
  }
  KS_RETURN_IF_ERROR(AnalyzeSegmentIds(inputs, p));
  KS_RETURN_IF_ERROR(AnalyzeAttributes(attrs, p));
  return p;
}

std::vector<ArgDoc> FlashAttentionKernel::input_docs() const {
  return {{"q", true, "f32|f16|bf16 [B,Sq,Hq,D]; varlen [Tq,Hq,D] or [1,Tq,Hq,D]; 1 <= D <= 256"},
          {"k", true, "dtype of q [B,Sk,Hkv,D]; varlen [Tk,Hkv,D] or [1,Tk,Hkv,D]; Hq % Hkv == 0"},
          {"v", true, "dtype and shape of k"},
          {"cu_seqlens_q", false, "i32|i64 [N+1] query offsets (varlen; with cu_seqlens_k)"},
          {"cu_seqlens_k", false, "i32|i64 [N+1] key offsets (varlen; with cu_seqlens_q)"},
          {"q_segment_ids", false, "i32|i64 [B,Sq]; equal ids attend, <= 0 is padding (dense)"},
          {"kv_segment_ids", false, "i32|i64 [B,Sk]; with q_segment_ids (dense)"},
          {"bias", false, "f32 [B or 1,Hq or 1,Sq,Sk] added to the logits (dense)"}};
}

std::vector<ArgDoc> FlashAttentionKernel::output_docs() const {
  return {{"out", true, "dtype and shape of q"},
          {"lse", false, "f32 [B,Hq,Sq] (varlen [Hq,Tq]) natural-log sum of exp; with return_lse"}};
}

std::vector<ArgDoc> FlashAttentionKernel::attribute_docs() const {
  return {{"causal", false, "bool, default false: key j <= i + Sk - Sq (bottom-right)"},
          {"softmax_scale", false, "double, 0 or absent = 1/sqrt(D)"},
          {"window_left", false, "int >= 0, absent = unlimited: j >= i + Sk - Sq - left"},
          {"window_right", false, "int >= 0, absent = unlimited: j <= i + Sk - Sq + right"},
          {"logits_soft_cap", false, "double >= 0, 0 = off: cap * tanh(s / cap) before bias"},
          {"return_lse", false, "bool, default false: also output lse"}};
}

absl::Status FlashAttentionKernel::Validate(const TensorSpecMap& inputs,
                                            const Attributes& attrs) const {
  return AnalyzeFlashAttention(inputs, attrs).status();
}

absl::Status FlashAttentionKernel::ValidateData(const TensorMap& inputs,
                                                const Attributes& attrs) const {
  KS_ASSIGN_OR_RETURN(const FlashAttentionProblem p, AnalyzeFlashAttention(SpecsOf(inputs), attrs));
  if (!p.varlen) return absl::OkStatus();
  for (const auto& [name, total] : {std::pair<std::string, int64_t>{"cu_seqlens_q", p.total_q},
                                    std::pair<std::string, int64_t>{"cu_seqlens_k", p.total_k}}) {
    const absl::Status status = ValidateCuSeqlens(inputs.at(name), total);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' (", total, " rows): ", status.message()));
    }
  }
  return absl::OkStatus();
}

TensorSpecMap FlashAttentionKernel::OutputSpecs(const TensorSpecMap& inputs,
                                                const Attributes& attrs) const {
  absl::StatusOr<FlashAttentionProblem> p = AnalyzeFlashAttention(inputs, attrs);
  if (!p.ok()) return {};
  TensorSpecMap specs = {{"out", inputs.at("q")}};
  if (p->return_lse) {
    const Shape lse = p->varlen ? Shape{p->num_heads_q, p->total_q}
                                : Shape{p->num_sequences, p->num_heads_q, p->seq_len_q};
    specs["lse"] = TensorSpec{DType::kF32, lse};
  }
  return specs;
}

KernelConfig CpuFlashAttentionHeuristic(const FlashAttentionProblem& p, const DeviceInfo& device) {
  // Mean sequence lengths (exact in the dense form).
  const int64_t n = std::max<int64_t>(p.num_sequences, 1);
  const double mean_q = static_cast<double>(p.total_q) / static_cast<double>(n);
  const double mean_k = static_cast<double>(p.total_k) / static_cast<double>(n);
  const double macs = 2.0 * static_cast<double>(n) * static_cast<double>(p.num_heads_q) * mean_q *
                      mean_k * static_cast<double>(p.head_dim);
  const int block_q = mean_q <= 16.0 ? 16 : 32;
  const int block_k = p.head_dim <= 64 ? 64 : 32;
  const int threads = macs < kSingleThreadMacs ? 1 : HardwareThreads(device);
  return CpuConfig(block_q, block_k, threads);
}

KernelConfig CudaFlashAttentionHeuristic(const FlashAttentionProblem& problem,
                                         const DeviceInfo& device) {
  return cuda::FlashAttentionHeuristic(problem, device);
}

KernelConfig FlashAttentionKernel::HeuristicConfig(const TensorSpecMap& inputs,
                                                   const Attributes& attrs,
                                                   const DeviceInfo& device) const {
  const FlashAttentionProblem p = ProblemOrDefault(inputs, attrs);
  switch (device.platform) {
    case Platform::kCpu:
      return CpuFlashAttentionHeuristic(p, device);
    case Platform::kCuda:
      return CudaFlashAttentionHeuristic(p, device);
    default:
      return KernelConfig{};
  }
}

std::vector<KernelConfig> FlashAttentionKernel::CandidateConfigs(const TensorSpecMap& inputs,
                                                                 const Attributes& attrs,
                                                                 const DeviceInfo& device) const {
  if (device.platform == Platform::kCuda) {
    return cuda::FlashAttentionCandidates(ProblemOrDefault(inputs, attrs), device);
  }
  if (device.platform != Platform::kCpu) return {};
  const std::set<int> threads = {1, 2, HardwareThreads(device)};
  std::vector<KernelConfig> configs;
  for (int block_q : {16, 32, 64}) {
    for (int block_k : {32, 64, 128}) {
      for (int t : threads) configs.push_back(CpuConfig(block_q, block_k, t));
    }
  }
  return configs;
}

std::unique_ptr<Kernel> MakeFlashAttentionKernel() {
  auto kernel = std::make_unique<FlashAttentionKernel>();
  kernel->AddImpl(std::make_unique<cpu::FlashAttentionCpuImpl>());
  return kernel;
}

}  // namespace kernelserve
