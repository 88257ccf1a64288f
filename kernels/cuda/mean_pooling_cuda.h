// Test support for the CUDA mean pooling runs (see MakeCudaMeanPooling in cuda_platform.h).
#ifndef KERNELSERVE_KERNELS_CUDA_MEAN_POOLING_CUDA_H_
#define KERNELSERVE_KERNELS_CUDA_MEAN_POOLING_CUDA_H_

#include "absl/status/status.h"
#include "core/kernel.h"

namespace kernelserve::cuda {

// Fills the device outputs of `run` (made by MakeCudaMeanPooling()->Prepare) with all-ones
// bytes, a NaN in f32, f16 and bf16, and waits; an element the next Launch leaves unwritten
// then shows. InvalidArgument when `run` comes from another implementation. Not thread-safe
// (like the run).
absl::Status PoisonMeanPoolingOutputs(PreparedRun& run);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_CUDA_MEAN_POOLING_CUDA_H_
