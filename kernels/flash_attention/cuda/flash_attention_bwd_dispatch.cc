#include "kernels/flash_attention/cuda/flash_attention_bwd_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_instances.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"

namespace kernelserve::cuda {
namespace {

enum Algorithm { kMma, kWgmma };

// One integer per (algorithm, dtype, head dim, block_q, block_k), for the switch below.
// REQUIRES: every field below its bound (checked by the caller).
constexpr int64_t Key(Algorithm algorithm, DType dtype, int64_t d, int64_t bq, int64_t bk) {
  return (((static_cast<int64_t>(algorithm) * 64 + static_cast<int64_t>(dtype)) * 512 + d) * 512 +
          bq) *
             512 +
         bk;
}

}  // namespace

absl::StatusOr<FlashBwdLaunchFn> SelectFlashBwdLaunch(DType dtype, int64_t head_dim,
                                                      const KernelConfig& config) {
  const bool wgmma = config.algorithm == kFlashWgmmaAlgorithm;
  if (head_dim > 0 && head_dim < 512 && config.block_q > 0 && config.block_q < 512 &&
      config.block_k > 0 && config.block_k < 512 && (wgmma || config.algorithm.empty())) {
#define KS_FLASH_BWD_CASE(ALGO, DT, CT, D, BQ, BK) \
  case Key(k##ALGO, DType::DT, D, BQ, BK):         \
    return &LaunchFlashAttentionBwd##ALGO<CT, D, BQ, BK>;
    switch (Key(wgmma ? kWgmma : kMma, dtype, head_dim, config.block_q, config.block_k)) {
      KS_FOR_EACH_FLASH_BWD_INSTANCE(KS_FLASH_BWD_CASE)
      default:
        break;
    }
#undef KS_FLASH_BWD_CASE
  }
  return absl::UnimplementedError(absl::StrCat(
      "flash_attention_bwd (cuda): no kernel compiled for dtype ", Sv(DTypeName(dtype)),
      ", head dim ", head_dim, ", block_q ", config.block_q, ", block_k ", config.block_k,
      ", algorithm '", Sv(config.algorithm),
      "' (compiled: f16/bf16, head dims 64 and 128, block_q 64 with block_k 64 or 128, and "
      "algorithm wgmma with block_k 128 in builds for Hopper; see "
      "kernels/flash_attention/cuda/flash_attention_bwd_config.h)"));
}

}  // namespace kernelserve::cuda
