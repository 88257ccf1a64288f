// The CUDA mean_pooling_bwd kernel's configs: limits, the autotune space and the heuristic.
// Plain C++ (no CUDA types), built with or without CUDA so it is testable here.
//
// A config is {num_warps, block_size, platform "cuda"}: num_warps warps per block, block_size
// rows of dx per block. Both are runtime values of one compiled kernel per (dtype, vector
// width), so every config within the limits is compiled.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CONFIG_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CONFIG_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_limits.h"

namespace kernelserve::cuda {

// The rows and row width of one problem, as the config choice sees them.
struct PoolingBwdShape {
  DType dtype = DType::kF32;
  int64_t total_rows = 0;  // rows of dx
  int64_t hidden = 0;      // H
};

// The cuda platform's config schema: num_warps 1..kPoolBwdMaxWarps, block_size
// 1..kPoolBwdMaxRows.
const ConfigSchema& MeanPoolingBwdCudaConfigSchema();

// OK when `config` can run `shape`: platform "" or "cuda", num_warps 1..kPoolBwdMaxWarps,
// block_size 1..kPoolBwdMaxRows, a grid within kPoolBwdMaxBlocks, the other fields zero.
// InvalidArgument naming the field and its range otherwise.
absl::Status CheckPoolingBwdConfig(const KernelConfig& config, const PoolingBwdShape& shape);
// num_warps in {4, 8, 16} x block_size in {16, 64, 256}, those passing the check.
std::vector<KernelConfig> PoolingBwdCandidates(const PoolingBwdShape& shape,
                                               const DeviceInfo& device);
// A pure function of the shape; always one of PoolingBwdCandidates(shape, device).
KernelConfig PoolingBwdHeuristic(const PoolingBwdShape& shape, const DeviceInfo& device);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CONFIG_H_
