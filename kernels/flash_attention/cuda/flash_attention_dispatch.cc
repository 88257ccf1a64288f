#include "kernels/flash_attention/cuda/flash_attention_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/cuda/flash_attention_instances.h"

namespace kernelserve::cuda {
namespace {

// One integer per (algorithm, dtype, head dim, block_q, block_k, warps, stages), for the switch
// below. REQUIRES: every field below its bound (checked by the caller).
constexpr int64_t Key(FlashAlgorithm algo, DType dtype, int64_t d, int64_t bq, int64_t bk,
                      int64_t warps, int64_t stages) {
  const int64_t head = static_cast<int64_t>(algo) * 64 + static_cast<int64_t>(dtype);
  return (((((head * 512 + d) * 512 + bq) * 512 + bk) * 64 + warps) * 16) + stages;
}

}  // namespace

absl::StatusOr<FlashLaunchFn> SelectFlashLaunch(DType dtype, int64_t head_dim,
                                                const KernelConfig& config) {
  FlashAlgorithm algo = FlashAlgorithm::kMma;
  const bool in_range = FlashAlgorithmNamed(config.algorithm, &algo) && head_dim > 0 &&
                        head_dim < 512 && config.block_q > 0 && config.block_q < 512 &&
                        config.block_k > 0 && config.block_k < 512 && config.num_warps > 0 &&
                        config.num_warps < 64 && config.num_stages > 0 && config.num_stages < 16;
  if (in_range) {
#define KS_FLASH_CASE(ALGO, DT, CT, D, BQ, BK, WARPS, STAGES)             \
  case Key(FlashAlgorithm::k##ALGO, DType::DT, D, BQ, BK, WARPS, STAGES): \
    return &LaunchFlashAttention##ALGO<CT, D, BQ, BK, WARPS, STAGES>;
    switch (Key(algo, dtype, head_dim, config.block_q, config.block_k, config.num_warps,
                config.num_stages)) {
      KS_FOR_EACH_FLASH_INSTANCE(KS_FLASH_CASE)
      default:
        break;
    }
#undef KS_FLASH_CASE
  }
  return absl::UnimplementedError(
      absl::StrCat("flash attention (cuda): no kernel compiled for algorithm '",
                   Sv(config.algorithm), "', dtype ", Sv(DTypeName(dtype)), ", head dim ", head_dim,
                   ", block_q ", config.block_q, ", block_k ", config.block_k, ", num_warps ",
                   config.num_warps, ", num_stages ", config.num_stages,
                   " (compiled: f16/bf16, head dims 32, 64, 96, 128 and 256, algorithm '', or "
                   "'wgmma', 'wgmma_ws' and 'wgmma_pp' where the build targets sm_90a; see "
                   "kernels/flash_attention/cuda/flash_attention_config.h)"));
}

}  // namespace kernelserve::cuda
