// The CUDA mean pooling kernel's configs: which ones are compiled, the autotune space and the
// heuristic. Plain C++ (no CUDA types), built with or without CUDA so it is testable here.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CONFIG_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CONFIG_H_

#include <cstdint>
#include <vector>

#include "core/config_schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"

namespace kernelserve::cuda {

// The shape of one mean pooling problem, as the config choice sees it.
struct MeanPoolingShape {
  PoolingForm form = PoolingForm::kDense;
  DType dtype = DType::kF32;
  int64_t num_sequences = 0;  // B (dense, masked) or N (varlen)
  int64_t total_rows = 0;     // B*S (dense, masked) or T (varlen)
  int64_t hidden = 0;         // H
};

// The problem's shape as the config choice sees it.
MeanPoolingShape MeanPoolingShapeOf(const MeanPoolingProblem& problem);

// The cuda platform's config schema: num_warps, "lanes", num_stages and block_size within the
// bounds of the lists in mean_pooling_space.h (the exact lists are checked after it).
const ConfigSchema& MeanPoolingCudaConfigSchema();

// Every config the .cu files compile, in a fixed order.
const std::vector<KernelConfig>& MeanPoolingCompiledConfigs();
// The autotune space for `shape` on `device`: a subset of the compiled configs.
std::vector<KernelConfig> MeanPoolingCandidates(const MeanPoolingShape& shape,
                                                const DeviceInfo& device);
// A pure function of shape and device; always one of MeanPoolingCandidates(shape, device).
KernelConfig MeanPoolingHeuristic(const MeanPoolingShape& shape, const DeviceInfo& device);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_CONFIG_H_
