#include "kernels/paged_attention/cuda/paged_attention_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "kernels/paged_attention/cuda/paged_attention_instances.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"

namespace kernelserve::cuda {
namespace {

static_assert(kPagedNumWarps.size() == 1 && kPagedNumWarps[0] == 4,
              "kPagedNumWarps must match the warp counts of KS_FOR_EACH_PAGED_INSTANCE");
static_assert(kPagedHeadDims[0] == 64 && kPagedHeadDims[1] == 128 && kPagedHeadDims[2] == 256,
              "kPagedHeadDims must match the head dims of KS_FOR_EACH_PAGED_INSTANCE");

// One integer per (dtype, head dim, warps), for the switch below.
constexpr int64_t Key(DType dtype, int64_t head_dim, int num_warps) {
  return (static_cast<int64_t>(dtype) * 1024 + head_dim) * 64 + num_warps;
}

}  // namespace

absl::StatusOr<PagedAttentionLaunchFn> SelectPagedAttentionLaunch(DType dtype, int64_t head_dim,
                                                                  int num_warps) {
  // TODO(issue 36): fp8 caches: the cache dtype joins the key (and the instances) here.
  if (head_dim > 0 && head_dim < 1024 && num_warps > 0 && num_warps < 64) {
#define KS_PAGED_CASE(DT, CT, D, WARPS) \
  case Key(DType::DT, D, WARPS):        \
    return &LaunchPagedAttention<CT, D, WARPS>;
    switch (Key(dtype, head_dim, num_warps)) {
      KS_FOR_EACH_PAGED_INSTANCE(KS_PAGED_CASE)
      default:
        break;
    }
#undef KS_PAGED_CASE
  }
  return absl::UnimplementedError(
      absl::StrCat("paged attention: no CUDA kernel compiled for dtype ", Sv(DTypeName(dtype)),
                   ", head_dim ", head_dim, ", num_warps ", num_warps,
                   " (compiled: f16/bf16, head_dim 64, 128 or 256, num_warps 4)"));
}

absl::StatusOr<PagedAppendLaunchFn> SelectPagedAppendLaunch(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return &LaunchPagedAppend<__half>;
    case DType::kBF16:
      return &LaunchPagedAppend<__nv_bfloat16>;
    default:
      return absl::UnimplementedError(absl::StrCat("paged attention: no CUDA append compiled for ",
                                                   Sv(DTypeName(dtype)), " (compiled: f16/bf16)"));
  }
}

}  // namespace kernelserve::cuda
