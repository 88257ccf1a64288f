#include "kernels/flash_attention/flash_attention_kernel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/seqlens.h"
#include "core/utils/string_view.h"
#include "kernels/attention_params.h"

namespace kernelserve {
namespace {

constexpr int64_t kMaxHeadDim = 256;
// Below this many multiply-adds (about a millisecond of one core) one thread beats several.
constexpr double kSingleThreadMacs = 4194304.0;  // 2^22

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

absl::Status CheckDtypes(const TensorSpecMap& inputs) {
  const DType dtype = inputs.at("q").dtype;
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
  p.q_shape = inputs.at("q").shape;
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

// The contract's rules beyond the schema. REQUIRES: schema checks passed, params canonical.
absl::StatusOr<FlashAttentionProblem> AnalyzeRules(const TensorSpecMap& inputs,
                                                   const Attributes& attrs) {
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
  ReadAttentionParams(FlashAttentionSchema(), attrs, p);
  return p;
}

std::vector<int64_t> EvenOffsets(int64_t sequences, int64_t total) {
  std::vector<int64_t> offsets(static_cast<size_t>(sequences + 1));
  for (int64_t n = 0; n <= sequences; ++n) {
    offsets[static_cast<size_t>(n)] = sequences == 0 ? 0 : total * n / sequences;
  }
  return offsets;
}

}  // namespace

const KernelSchema& FlashAttentionSchema() {
  const std::vector<DType> floats = {DType::kF32, DType::kF16, DType::kBF16};
  const std::vector<DType> index = {DType::kI32, DType::kI64};
  static const KernelSchema* const schema = new KernelSchema{
      .name = "flash_attention",
      .version = 1,
      .doc = "softmax(scale * q k^T + bias, masked) v, forward",
      .inputs =
          {{"q",
            true,
            floats,
            {3, 4},
            "[B,Sq,Hq,D]; varlen [Tq,Hq,D] or [1,Tq,Hq,D]",
            "queries; 1 <= D <= 256"},
           {"k",
            true,
            floats,
            {3, 4},
            "[B,Sk,Hkv,D]; varlen [Tk,Hkv,D] or [1,Tk,Hkv,D]",
            "keys, dtype of q; Hq % Hkv == 0"},
           {"v", true, floats, {3, 4}, "shape of k", "values, dtype of q"},
           {"cu_seqlens_q",
            false,
            index,
            {1},
            "[N+1]",
            "query offsets (varlen, with cu_seqlens_k)"},
           {"cu_seqlens_k", false, index, {1}, "[N+1]", "key offsets (varlen, with cu_seqlens_q)"},
           {"q_segment_ids",
            false,
            index,
            {2},
            "[B,Sq]",
            "equal ids attend, <= 0 is padding (dense)"},
           {"kv_segment_ids", false, index, {2}, "[B,Sk]", "with q_segment_ids (dense)"},
           {"bias",
            false,
            {DType::kF32},
            {4},
            "[B or 1,Hq or 1,Sq,Sk]",
            "added to the logits (dense)"}},
      .outputs = {{"out", "dtype of q", "shape of q", "the attention output", "q"},
                  {"lse", "f32", "[B,Hq,Sq] (varlen [Hq,Tq])",
                   "natural-log sum of exp of each row's logits; with return_lse"}},
      .params = {{"causal", ParamType::kBool, false, std::nullopt, std::nullopt,
                  "key j visible iff j <= i + Sk - Sq (bottom-right)"},
                 {"softmax_scale", ParamType::kFloat, 0.0, std::nullopt, std::nullopt,
                  "scale of q k^T; 0 = 1/sqrt(D)"},
                 {"window_left", ParamType::kInt, int64_t{-1}, -1.0, std::nullopt,
                  "keys j >= i + Sk - Sq - window_left; -1 = unlimited"},
                 {"window_right", ParamType::kInt, int64_t{-1}, -1.0, std::nullopt,
                  "keys j <= i + Sk - Sq + window_right; -1 = unlimited"},
                 {"logits_soft_cap", ParamType::kFloat, 0.0, 0.0, std::nullopt,
                  "cap * tanh(logits / cap) before the bias; 0 = off"},
                 {"return_lse", ParamType::kBool, false, std::nullopt, std::nullopt,
                  "also return lse"}},
      .vjp = "flash_attention_bwd",
      .vjp_of = ""};
  return *schema;
}

Shape FlashLseShape(const FlashAttentionProblem& p) {
  return p.varlen ? Shape{p.num_heads_q, p.total_q}
                  : Shape{p.num_sequences, p.num_heads_q, p.seq_len_q};
}

Shape FlashBiasShape(const FlashAttentionProblem& p) {
  return {p.bias_batch, p.bias_heads, p.seq_len_q, p.seq_len_k};
}

absl::StatusOr<FlashAttentionProblem> AnalyzeFlashAttention(const TensorSpecMap& inputs,
                                                            const Attributes& params) {
  KS_RETURN_IF_ERROR(FlashAttentionSchema().CheckInputs(inputs));
  KS_ASSIGN_OR_RETURN(const Attributes attrs, FlashAttentionSchema().CanonicalParams(params));
  return AnalyzeRules(inputs, attrs);
}

absl::StatusOr<std::shared_ptr<const Problem>> FlashAttentionKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& attrs) const {
  KS_ASSIGN_OR_RETURN(FlashAttentionProblem p, AnalyzeRules(inputs, attrs));
  return std::make_shared<const FlashAttentionProblem>(std::move(p));
}

absl::Status FlashAttentionKernel::ValidateData(const Problem& problem,
                                                const TensorMap& inputs) const {
  const auto& p = ProblemAs<FlashAttentionProblem>(problem);
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

TensorSpecMap FlashAttentionKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<FlashAttentionProblem>(problem);
  TensorSpecMap specs = {{"out", TensorSpec{p.dtype, p.q_shape}}};
  if (p.return_lse) {
    specs.emplace("lse", TensorSpec{DType::kF32, FlashLseShape(p)});
  }
  return specs;
}

absl::StatusOr<TensorMap> FlashAttentionKernel::SynthesizeInputs(const Problem& problem,
                                                                 const TensorSpecMap& specs,
                                                                 uint64_t seed) const {
  KS_ASSIGN_OR_RETURN(TensorMap inputs, Kernel::SynthesizeInputs(problem, specs, seed));
  const auto& p = ProblemAs<FlashAttentionProblem>(problem);
  // Valid index data: sequences of near equal lengths; one segment per row (ids 1).
  for (const auto& [name, total] : {std::pair<std::string, int64_t>{"cu_seqlens_q", p.total_q},
                                    std::pair<std::string, int64_t>{"cu_seqlens_k", p.total_k}}) {
    if (auto it = inputs.find(name); it != inputs.end()) {
      it->second = Tensor::FromInts(it->second.dtype(), it->second.shape(),
                                    EvenOffsets(p.num_sequences, total));
    }
  }
  return inputs;
}

}  // namespace kernelserve
