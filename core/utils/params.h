// Parameters of an attention call as typed structs, merged and converted to Attributes.
//
// Value types; thread-compatible.
#ifndef KERNELSERVE_CORE_UTILS_PARAMS_H_
#define KERNELSERVE_CORE_UTILS_PARAMS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "core/attributes.h"

namespace kernelserve {

// Forward attention parameters. A field is "set" when it is an engaged optional or differs
// from its default; Merge and ToAttributes use that notion.
struct FwdParams {
  std::optional<float> softmax_scale;  // nullopt = 1 / sqrt(head_dim)
  bool causal = false;                 // mask keys after the query position
  std::optional<int> window_left;      // keys at most this far before the query; nullopt = all
  std::optional<int> window_right;     // keys at most this far after the query; nullopt = all
  float logits_soft_cap = 0.0f;        // cap * tanh(logits / cap) when > 0; 0 = off
  int chunk_size = 0;                  // attend within chunks of this many tokens; 0 = off

  bool operator==(const FwdParams& other) const = default;
};

// Backward attention parameters: the forward ones plus what only the backward pass uses.
struct BwdParams {
  std::optional<float> softmax_scale;  // as in FwdParams
  bool causal = false;                 // as in FwdParams
  std::optional<int> window_left;      // as in FwdParams
  std::optional<int> window_right;     // as in FwdParams
  float logits_soft_cap = 0.0f;        // as in FwdParams
  int chunk_size = 0;                  // as in FwdParams
  bool deterministic = false;          // accumulate dq in a fixed order (slower, reproducible)

  bool operator==(const BwdParams& other) const = default;
};

// `base` with every set field of `override_params` replacing its value. A plain field at its
// default in the override cannot reset the base (e.g. causal=false keeps base.causal).
FwdParams Merge(const FwdParams& base, const FwdParams& override_params);
BwdParams Merge(const BwdParams& base, const BwdParams& override_params);

// The backward parameters of a forward call (deterministic = false).
BwdParams BwdFromFwd(const FwdParams& fwd);

// Set fields only, so that equal parameters give equal attributes (and cache keys):
// "softmax_scale" (double), "causal" (bool), "window_left", "window_right", "chunk_size"
// (int), "logits_soft_cap" (double).
Attributes ToAttributes(const FwdParams& params);

// Inverse of ToAttributes; absent attributes keep their defaults and other names are ignored.
// InvalidArgument when an attribute has the wrong type or an int does not fit in an int.
absl::StatusOr<FwdParams> FwdParamsFromAttributes(const Attributes& attrs);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_PARAMS_H_
