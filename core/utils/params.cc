#include "core/utils/params.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

// The merge shared by both structs: optionals win when engaged, plain fields when non-default.
template <typename P>
P MergeCommon(const P& base, const P& over) {
  P out = base;
  if (over.softmax_scale) out.softmax_scale = over.softmax_scale;
  if (over.causal) out.causal = true;
  if (over.window_left) out.window_left = over.window_left;
  if (over.window_right) out.window_right = over.window_right;
  if (over.logits_soft_cap != 0.0f) out.logits_soft_cap = over.logits_soft_cap;
  if (over.chunk_size != 0) out.chunk_size = over.chunk_size;
  return out;
}

absl::StatusOr<std::optional<int>> OptionalInt(const Attributes& attrs, const std::string& name) {
  KS_ASSIGN_OR_RETURN(std::optional<int64_t> value, GetOptionalIntAttr(attrs, name));
  if (!value) return std::optional<int>();
  if (*value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "': value ", *value, " does not fit in an int"));
  }
  return std::optional<int>(static_cast<int>(*value));
}

}  // namespace

FwdParams Merge(const FwdParams& base, const FwdParams& override_params) {
  return MergeCommon(base, override_params);
}

BwdParams Merge(const BwdParams& base, const BwdParams& override_params) {
  BwdParams out = MergeCommon(base, override_params);
  if (override_params.deterministic) out.deterministic = true;
  return out;
}

BwdParams BwdFromFwd(const FwdParams& fwd) {
  BwdParams bwd;
  bwd.softmax_scale = fwd.softmax_scale;
  bwd.causal = fwd.causal;
  bwd.window_left = fwd.window_left;
  bwd.window_right = fwd.window_right;
  bwd.logits_soft_cap = fwd.logits_soft_cap;
  bwd.chunk_size = fwd.chunk_size;
  return bwd;
}

Attributes ToAttributes(const FwdParams& params) {
  Attributes attrs;
  if (params.softmax_scale) attrs["softmax_scale"] = static_cast<double>(*params.softmax_scale);
  if (params.causal) attrs["causal"] = true;
  if (params.window_left) attrs["window_left"] = static_cast<int64_t>(*params.window_left);
  if (params.window_right) attrs["window_right"] = static_cast<int64_t>(*params.window_right);
  if (params.logits_soft_cap != 0.0f) {
    attrs["logits_soft_cap"] = static_cast<double>(params.logits_soft_cap);
  }
  if (params.chunk_size != 0) attrs["chunk_size"] = static_cast<int64_t>(params.chunk_size);
  return attrs;
}

absl::StatusOr<FwdParams> FwdParamsFromAttributes(const Attributes& attrs) {
  FwdParams params;
  if (attrs.contains("softmax_scale")) {
    KS_ASSIGN_OR_RETURN(double scale, GetDoubleAttr(attrs, "softmax_scale", 0.0));
    params.softmax_scale = static_cast<float>(scale);
  }
  KS_ASSIGN_OR_RETURN(params.causal, GetBoolAttr(attrs, "causal", false));
  KS_ASSIGN_OR_RETURN(params.window_left, OptionalInt(attrs, "window_left"));
  KS_ASSIGN_OR_RETURN(params.window_right, OptionalInt(attrs, "window_right"));
  KS_ASSIGN_OR_RETURN(double cap, GetDoubleAttr(attrs, "logits_soft_cap", 0.0));
  params.logits_soft_cap = static_cast<float>(cap);
  KS_ASSIGN_OR_RETURN(std::optional<int> chunk, OptionalInt(attrs, "chunk_size"));
  params.chunk_size = chunk.value_or(0);
  return params;
}

}  // namespace kernelserve
