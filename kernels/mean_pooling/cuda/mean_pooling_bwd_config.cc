#include "kernels/mean_pooling/cuda/mean_pooling_bwd_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve::cuda {
namespace {

KernelConfig Config(int warps, int rows) {
  KernelConfig config;
  config.num_warps = warps;
  config.block_size = rows;
  config.platform = "cuda";
  return config;
}

}  // namespace

const ConfigSchema& MeanPoolingBwdCudaConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("num_warps", 1, kPoolBwdMaxWarps, "none: always set", "warps per block"),
      IntConfigField("block_size", 1, kPoolBwdMaxRows, "none: always set", "rows of dx per block"),
  }};
  return *kSchema;
}

absl::Status CheckPoolingBwdConfig(const KernelConfig& config, const PoolingBwdShape& shape) {
  if (!config.platform.empty() && config.platform != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("mean_pooling_bwd (cuda): config platform '",
                                                   config.platform, "': expected \"cuda\""));
  }
  KS_RETURN_IF_ERROR(MeanPoolingBwdCudaConfigSchema().Check(config, "mean_pooling_bwd on cuda"));
  const int64_t blocks = (shape.total_rows + config.block_size - 1) / config.block_size;
  if (blocks > kPoolBwdMaxBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("mean_pooling_bwd (cuda): block_size ", config.block_size, " needs ", blocks,
                     " blocks for ", shape.total_rows, " rows; at most ", kPoolBwdMaxBlocks));
  }
  return absl::OkStatus();
}

std::vector<KernelConfig> PoolingBwdCandidates(const PoolingBwdShape& shape,
                                               const DeviceInfo& /*device*/) {
  std::vector<KernelConfig> configs;
  for (int warps : {4, 8, 16}) {
    for (int rows : {16, 64, 256}) {
      KernelConfig config = Config(warps, rows);
      if (CheckPoolingBwdConfig(config, shape).ok()) configs.push_back(std::move(config));
    }
  }
  return configs;
}

KernelConfig PoolingBwdHeuristic(const PoolingBwdShape& shape, const DeviceInfo& /*device*/) {
  // A write-only kernel: a block should write enough (>= 16 KB) to hide its start and the
  // per-row sequence lookup, and the grid should still fill the GPU. 8 warps with 16 rows of
  // >= 1 KB rows, 64 rows below that, 256 rows for rows of at most 64 bytes.
  const int64_t row_bytes = shape.hidden * static_cast<int64_t>(ItemSize(shape.dtype));
  int rows = 64;
  if (row_bytes >= 1024) rows = 16;
  if (row_bytes <= 64) rows = 256;
  KernelConfig config = Config(8, rows);
  if (CheckPoolingBwdConfig(config, shape).ok()) return config;
  return Config(8, kPoolBwdMaxRows);  // the fewest blocks (rows beyond 2^39 only)
}

}  // namespace kernelserve::cuda
