#include "kernels/paged_attention/cuda/paged_attention_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// One integer per (dtype, cache dtype, head dim, warps), for the switches below.
constexpr int64_t Key(DType dtype, DType cache_dtype, int64_t head_dim = 0, int num_warps = 0) {
  return ((static_cast<int64_t>(dtype) * 16 + static_cast<int64_t>(cache_dtype)) * 1024 +
          head_dim) *
             64 +
         num_warps;
}

constexpr char kCompiled[] =
    "compiled: q f16/bf16 with caches of q's dtype, f8_e4m3 or f8_e5m2; head_dim 64, 128 or 256; "
    "num_warps 4";

}  // namespace

absl::StatusOr<PagedAttentionLaunchFn> SelectPagedAttentionLaunch(DType dtype, DType cache_dtype,
                                                                  int64_t head_dim, int num_warps) {
  if (head_dim > 0 && head_dim < 1024 && num_warps > 0 && num_warps < 64) {
#define KS_PAGED_CASE(DT, CT, CDT, CCT, D, WARPS) \
  case Key(DType::DT, DType::CDT, D, WARPS):      \
    return &LaunchPagedAttention<CT, CCT, D, WARPS>;
    switch (Key(dtype, cache_dtype, head_dim, num_warps)) {
      KS_FOR_EACH_PAGED_INSTANCE(KS_PAGED_CASE)
      default:
        break;
    }
#undef KS_PAGED_CASE
  }
  return absl::UnimplementedError(absl::StrCat("paged attention: no CUDA kernel compiled for q ",
                                               Sv(DTypeName(dtype)), ", caches ",
                                               Sv(DTypeName(cache_dtype)), ", head_dim ", head_dim,
                                               ", num_warps ", num_warps, " (", kCompiled, ")"));
}

absl::StatusOr<PagedAppendLaunchFn> SelectPagedAppendLaunch(DType dtype, DType cache_dtype) {
#define KS_PAGED_APPEND_CASE(DT, CT, CDT, CCT) \
  case Key(DType::DT, DType::CDT):             \
    return &LaunchPagedAppend<CT, CCT>;
  switch (Key(dtype, cache_dtype)) {
    KS_FOR_EACH_PAGED_CACHE_TYPE(KS_PAGED_APPEND_CASE)
    default:
      break;
  }
#undef KS_PAGED_APPEND_CASE
  return absl::UnimplementedError(
      absl::StrCat("paged attention: no CUDA append compiled for new keys and values of ",
                   Sv(DTypeName(dtype)), " into caches of ", Sv(DTypeName(cache_dtype)),
                   " (compiled: f16/bf16 into caches of their dtype, f8_e4m3 or f8_e5m2)"));
}

}  // namespace kernelserve::cuda
