// The params every attention kernel of the house takes (flash_attention, paged_attention):
// causal, softmax_scale, window_left, window_right, logits_soft_cap and return_lse.
#ifndef KERNELSERVE_KERNELS_ATTENTION_PARAMS_H_
#define KERNELSERVE_KERNELS_ATTENTION_PARAMS_H_

#include <cmath>
#include <cstdint>

#include "core/attributes.h"
#include "core/schema.h"

namespace kernelserve {

// Reads the attention params of `attrs` into `problem`'s fields of the same names, the scale
// resolved (0 = 1/sqrt(D), D being problem.head_dim). P: a problem with those fields.
// REQUIRES: `attrs` canonical for `schema` (types and bounds checked), head_dim set.
template <typename P>
void ReadAttentionParams(const KernelSchema& schema, const Attributes& attrs, P& problem) {
  problem.causal = ParamOr<bool>(schema, attrs, "causal");
  problem.return_lse = ParamOr<bool>(schema, attrs, "return_lse");
  const double scale = ParamOr<double>(schema, attrs, "softmax_scale");
  problem.softmax_scale =
      scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(problem.head_dim));
  problem.logits_soft_cap = ParamOr<double>(schema, attrs, "logits_soft_cap");
  problem.window_left = ParamOr<int64_t>(schema, attrs, "window_left");
  problem.window_right = ParamOr<int64_t>(schema, attrs, "window_right");
}

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_ATTENTION_PARAMS_H_
