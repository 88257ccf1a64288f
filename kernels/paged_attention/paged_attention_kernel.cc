#include "kernels/paged_attention/paged_attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/attention_params.h"

namespace kernelserve {
namespace {

constexpr int64_t kMaxHeadDim = 256;

absl::Status Invalid(const std::string& input, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", what));
}

absl::Status CheckSameDtype(const TensorSpecMap& inputs, DType dtype,
                            std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = inputs.find(name);
    if (it == inputs.end() || it->second.dtype == dtype) continue;
    return Invalid(name, absl::StrCat("dtype ", Sv(DTypeName(it->second.dtype)),
                                      " differs from q's ", Sv(DTypeName(dtype)),
                                      ": expected q, the caches and k, v of one dtype (or both "
                                      "caches fp8 with q in f16 or bf16)"));
  }
  return absl::OkStatus();
}

// fp8 caches: both of one fp8 dtype, with q in f16 or bf16 (fp8 caches serve 16-bit models, and
// the GPU kernels, which take f16 and bf16 q alone, are written to that contract).
absl::Status CheckFp8Caches(const TensorSpecMap& inputs, const PagedAttentionProblem& p) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return Invalid("k_cache",
                   absl::StrCat("dtype ", Sv(DTypeName(p.cache_dtype)), " with q ",
                                Sv(DTypeName(p.dtype)), ": fp8 caches need q in f16 or bf16"));
  }
  const DType v_dtype = inputs.at("v_cache").dtype;
  if (v_dtype != p.cache_dtype) {
    return Invalid("v_cache", absl::StrCat("dtype ", Sv(DTypeName(v_dtype)),
                                           " differs from k_cache's ", Sv(DTypeName(p.cache_dtype)),
                                           ": expected both fp8 caches of one dtype"));
  }
  return absl::OkStatus();
}

// Sets p.dtype and p.cache_dtype: the caches of q's dtype or both of one fp8 dtype; k and v
// of q's dtype.
absl::Status AnalyzeDtypes(const TensorSpecMap& inputs, PagedAttentionProblem& p) {
  p.dtype = inputs.at("q").dtype;
  p.cache_dtype = inputs.at("k_cache").dtype;
  KS_RETURN_IF_ERROR(IsFp8(p.cache_dtype)
                         ? CheckFp8Caches(inputs, p)
                         : CheckSameDtype(inputs, p.dtype, {"k_cache", "v_cache"}));
  return CheckSameDtype(inputs, p.dtype, {"k", "v"});
}

// Fills the sizes of `p` from q and the caches.
absl::Status AnalyzeQAndCaches(const TensorSpecMap& inputs, PagedAttentionProblem& p) {
  const Shape& q = inputs.at("q").shape;
  const Shape& kc = inputs.at("k_cache").shape;
  p.batch = q[0];
  p.seq_len_q = q[1];
  p.num_heads_q = q[2];
  p.head_dim = q[3];
  if (p.head_dim < 1 || p.head_dim > kMaxHeadDim) {
    return Invalid("q",
                   absl::StrCat("head dim D = ", p.head_dim, ": expected 1 <= D <= ", kMaxHeadDim));
  }
  if (p.seq_len_q < 1) return Invalid("q", "Sq = 0: expected at least one query token");
  if (inputs.at("v_cache").shape != kc) {
    return Invalid("v_cache", absl::StrCat("expected the shape of k_cache ", ShapeString(kc),
                                           ", got ", ShapeString(inputs.at("v_cache").shape)));
  }
  p.num_pages = kc[0];
  p.page_size = kc[1];
  p.num_heads_kv = kc[2];
  if (p.page_size < 1) return Invalid("k_cache", "page_size (dim 1) = 0: expected >= 1");
  if (kc[3] != p.head_dim) {
    return Invalid("k_cache", absl::StrCat("head dim ", kc[3], " differs from q's ", p.head_dim));
  }
  if (p.num_heads_kv < 1 || p.num_heads_q % p.num_heads_kv != 0) {
    return Invalid("k_cache",
                   absl::StrCat("q has ", p.num_heads_q, " heads, the cache ", p.num_heads_kv,
                                ": Hq must be a multiple of Hkv (both >= 1)"));
  }
  return absl::OkStatus();
}

absl::Status AnalyzeIndex(const TensorSpecMap& inputs, PagedAttentionProblem& p) {
  const Shape& table = inputs.at("block_table").shape;
  if (table[0] != p.batch) {
    return Invalid("block_table", absl::StrCat("expected [B,max_pages] with B = ", p.batch,
                                               " (q's batch), got ", ShapeString(table)));
  }
  p.max_pages = table[1];
  const Shape& lens = inputs.at("cache_seqlens").shape;
  if (lens != Shape{p.batch}) {
    return Invalid("cache_seqlens", absl::StrCat("expected [B] = ", ShapeString({p.batch}),
                                                 ", got ", ShapeString(lens)));
  }
  return absl::OkStatus();
}

absl::Status AnalyzeAppend(const TensorSpecMap& inputs, PagedAttentionProblem& p) {
  const bool has_k = inputs.contains("k");
  const bool has_v = inputs.contains("v");
  if (!has_k && !has_v) return absl::OkStatus();
  if (has_k != has_v) {
    return Invalid(has_k ? "k" : "v", "given alone: expected k and v together (append)");
  }
  const Shape expected = {p.batch, p.seq_len_q, p.num_heads_kv, p.head_dim};
  for (const char* name : {"k", "v"}) {
    if (inputs.at(name).shape != expected) {
      return Invalid(name, absl::StrCat("expected [B,Sq,Hkv,D] = ", ShapeString(expected), ", got ",
                                        ShapeString(inputs.at(name).shape)));
    }
  }
  p.append = true;
  return absl::OkStatus();
}

// k_scale and v_scale: [Hkv], with fp8 caches only (other caches hold their values as they are).
absl::Status AnalyzeScales(const TensorSpecMap& inputs, PagedAttentionProblem& p) {
  for (const char* name : {"k_scale", "v_scale"}) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;
    if (!IsFp8(p.cache_dtype)) {
      return Invalid(name, absl::StrCat(name, " applies to fp8 caches only; the caches are ",
                                        Sv(DTypeName(p.cache_dtype))));
    }
    const Shape expected = {p.num_heads_kv};
    if (it->second.shape != expected) {
      return Invalid(name, absl::StrCat("expected [Hkv] = ", ShapeString(expected), ", got ",
                                        ShapeString(it->second.shape)));
    }
  }
  p.has_k_scale = inputs.contains("k_scale");
  p.has_v_scale = inputs.contains("v_scale");
  return absl::OkStatus();
}

absl::StatusOr<PagedAttentionProblem> AnalyzeRules(const TensorSpecMap& inputs,
                                                   const Attributes& attrs) {
  PagedAttentionProblem p;
  KS_RETURN_IF_ERROR(AnalyzeDtypes(inputs, p));
  KS_RETURN_IF_ERROR(AnalyzeQAndCaches(inputs, p));
  KS_RETURN_IF_ERROR(AnalyzeIndex(inputs, p));
  KS_RETURN_IF_ERROR(AnalyzeAppend(inputs, p));
  KS_RETURN_IF_ERROR(AnalyzeScales(inputs, p));
  ReadAttentionParams(PagedAttentionSchema(), attrs, p);
  return p;
}

// InvalidArgument unless every length is within the sequence's pages (and holds the new tokens
// when appending).
absl::Status CheckLengths(const PagedAttentionProblem& p, const std::vector<int64_t>& lens) {
  const int64_t capacity = p.max_pages * p.page_size;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    if (len < 0 || len > capacity) {
      return Invalid(
          "cache_seqlens",
          absl::StrCat("sequence ", b, " has length ", len, ": expected 0 <= L <= ", capacity,
                       " (max_pages ", p.max_pages, " x page_size ", p.page_size, ")"));
    }
    if (p.append && len > 0 && len < p.seq_len_q) {
      return Invalid("cache_seqlens",
                     absl::StrCat("sequence ", b, " has length ", len, " but appends ", p.seq_len_q,
                                  " new tokens: expected L = 0 (empty) or L >= Sq"));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument unless the pages each sequence uses are in range and no two appends write one
// slot.
absl::Status CheckPages(const PagedAttentionProblem& p, const std::vector<int64_t>& lens,
                        const std::vector<int64_t>& table) {
  std::set<int64_t> appended;  // page * page_size + slot
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    const int64_t used = (len + p.page_size - 1) / p.page_size;
    for (int64_t i = 0; i < used; ++i) {
      const int64_t page = table[static_cast<size_t>(b * p.max_pages + i)];
      if (page < 0 || page >= p.num_pages) {
        return Invalid("block_table",
                       absl::StrCat("entry [", b, ",", i, "] = ", page, ": expected a page in [0, ",
                                    p.num_pages, ") (sequence ", b, " has ", len, " tokens)"));
      }
    }
    if (!p.append || len == 0) continue;
    for (int64_t t = len - p.seq_len_q; t < len; ++t) {
      const int64_t page = table[static_cast<size_t>(b * p.max_pages + t / p.page_size)];
      if (!appended.insert(page * p.page_size + t % p.page_size).second) {
        return Invalid(
            "block_table",
            absl::StrCat("sequence ", b, " appends token ", t, " into slot ", t % p.page_size,
                         " of page ", page, ", which another sequence of the call appends to too"));
      }
    }
  }
  return absl::OkStatus();
}

// InvalidArgument unless every given scale is finite and positive: the append divides by it,
// and a zero, negative or non-finite scale stands for no quantization of the cache's values.
absl::Status CheckScales(const TensorMap& inputs) {
  for (const char* name : {"k_scale", "v_scale"}) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;
    for (int64_t h = 0; h < it->second.numel(); ++h) {
      const float scale = it->second.GetFloat(h);
      if (!std::isfinite(scale) || scale <= 0.0f) {
        return Invalid(name,
                       absl::StrCat("head ", h, " has scale ", scale, ": expected finite and > 0"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

const KernelSchema& PagedAttentionSchema() {
  const std::vector<DType> floats = {DType::kF32, DType::kF16, DType::kBF16};
  const std::vector<DType> caches = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                     DType::kF8E5M2};
  static const KernelSchema* const schema = new KernelSchema{
      .name = "paged_attention",
      .version = 1,
      .doc = "attention of new query tokens over a paged KV cache, optionally appending to it",
      .inputs = {{"q", true, floats, {4}, "[B,Sq,Hq,D]", "the new tokens' queries; D <= 256"},
                 {"k_cache",
                  true,
                  caches,
                  {4},
                  "[P,page_size,Hkv,D]",
                  "key pages, dtype of q or fp8 (q f16 or bf16); updated where k is given",
                  false,
                  true},
                 {"v_cache",
                  true,
                  caches,
                  {4},
                  "shape of k_cache",
                  "value pages; updated where v is given",
                  false,
                  true},
                 {"block_table",
                  true,
                  {DType::kI32},
                  {2},
                  "[B,max_pages]",
                  "page of each sequence's token t: block_table[b, t / page_size]"},
                 {"cache_seqlens",
                  true,
                  {DType::kI32},
                  {1},
                  "[B]",
                  "tokens in each sequence's cache, the new ones included; 0 = empty"},
                 {"k", false, floats, {4}, "[B,Sq,Hkv,D]", "new keys to append (with v)"},
                 {"v", false, floats, {4}, "[B,Sq,Hkv,D]", "new values to append (with k)"},
                 {"k_scale",
                  false,
                  {DType::kF32},
                  {1},
                  "[Hkv]",
                  "fp8 caches only: value = cache * scale[h]; default 1"},
                 {"v_scale",
                  false,
                  {DType::kF32},
                  {1},
                  "[Hkv]",
                  "fp8 caches only: value = cache * scale[h]; default 1"}},
      .outputs = {{"out", "dtype of q", "shape of q", "the attention output"},
                  {"lse", "f32", "[B,Hq,Sq]",
                   "natural-log sum of exp of each row's logits; with return_lse"}},
      .params = {{"causal", ParamType::kBool, false, std::nullopt, std::nullopt,
                  "query i (at position L - Sq + i) sees keys t <= L - Sq + i"},
                 {"softmax_scale", ParamType::kFloat, 0.0, std::nullopt, std::nullopt,
                  "scale of q k^T; 0 = 1/sqrt(D)"},
                 {"window_left", ParamType::kInt, int64_t{-1}, -1.0, std::nullopt,
                  "keys t >= L - Sq + i - window_left; -1 = unlimited"},
                 {"window_right", ParamType::kInt, int64_t{-1}, -1.0, std::nullopt,
                  "keys t <= L - Sq + i + window_right; -1 = unlimited"},
                 {"logits_soft_cap", ParamType::kFloat, 0.0, 0.0, std::nullopt,
                  "cap * tanh(logits / cap); 0 = off"},
                 {"return_lse", ParamType::kBool, false, std::nullopt, std::nullopt,
                  "also return lse"}},
      .vjp = "",
      .vjp_of = ""};
  return *schema;
}

absl::StatusOr<PagedAttentionProblem> AnalyzePagedAttention(const TensorSpecMap& inputs,
                                                            const Attributes& params) {
  KS_RETURN_IF_ERROR(PagedAttentionSchema().CheckInputs(inputs));
  KS_ASSIGN_OR_RETURN(const Attributes attrs, PagedAttentionSchema().CanonicalParams(params));
  return AnalyzeRules(inputs, attrs);
}

absl::StatusOr<std::shared_ptr<const Problem>> PagedAttentionKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes& attrs) const {
  KS_ASSIGN_OR_RETURN(PagedAttentionProblem p, AnalyzeRules(inputs, attrs));
  return std::make_shared<const PagedAttentionProblem>(std::move(p));
}

absl::Status PagedAttentionKernel::ValidateData(const Problem& problem,
                                                const TensorMap& inputs) const {
  const auto& p = ProblemAs<PagedAttentionProblem>(problem);
  const std::vector<int64_t> lens = inputs.at("cache_seqlens").ToInts();
  KS_RETURN_IF_ERROR(CheckLengths(p, lens));
  KS_RETURN_IF_ERROR(CheckPages(p, lens, inputs.at("block_table").ToInts()));
  return CheckScales(inputs);
}

TensorSpecMap PagedAttentionKernel::OutputSpecs(const Problem& problem) const {
  const auto& p = ProblemAs<PagedAttentionProblem>(problem);
  TensorSpecMap specs = {
      {"out", TensorSpec{p.dtype, {p.batch, p.seq_len_q, p.num_heads_q, p.head_dim}}}};
  if (p.return_lse) {
    specs.emplace("lse", TensorSpec{DType::kF32, {p.batch, p.num_heads_q, p.seq_len_q}});
  }
  return specs;
}

absl::StatusOr<TensorMap> PagedAttentionKernel::SynthesizeInputs(const Problem& problem,
                                                                 const TensorSpecMap& specs,
                                                                 uint64_t seed) const {
  KS_ASSIGN_OR_RETURN(TensorMap inputs, Kernel::SynthesizeInputs(problem, specs, seed));
  const auto& p = ProblemAs<PagedAttentionProblem>(problem);
  // Each sequence gets an equal share of the pages (never one page twice, so appends never
  // collide), dealt out in a shuffled order as a long-running cache's would be.
  const int64_t share = p.batch == 0 ? 0 : std::min(p.max_pages, p.num_pages / p.batch);
  std::vector<int64_t> pages(static_cast<size_t>(p.num_pages));
  std::iota(pages.begin(), pages.end(), int64_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int64_t> table(static_cast<size_t>(p.batch * p.max_pages), 0);
  std::vector<int64_t> lens(static_cast<size_t>(p.batch), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < share; ++i) {
      table[static_cast<size_t>(b * p.max_pages + i)] = pages[static_cast<size_t>(b * share + i)];
    }
    const int64_t len = share * p.page_size;
    lens[static_cast<size_t>(b)] = p.append && len < p.seq_len_q ? 0 : len;
  }
  inputs["block_table"] = Tensor::FromInts(DType::kI32, {p.batch, p.max_pages}, table);
  inputs["cache_seqlens"] = Tensor::FromInts(DType::kI32, {p.batch}, lens);
  // The default's fp8 caches hold finite values in [-1, 1]; scales must be positive.
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  for (const char* name : {"k_scale", "v_scale"}) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;
    for (int64_t h = 0; h < it->second.numel(); ++h) it->second.SetFloat(h, scale(rng));
  }
  return inputs;
}

}  // namespace kernelserve
