// The CUDA platform of mean_pooling_bwd.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CUDA_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CUDA_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// Runs every problem of the contract on a CUDA GPU; configs in mean_pooling_bwd_config.h.
// Uploads dout, the per-sequence counts (computed on the host) and the mask or offsets; never
// x. Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeMeanPoolingBwdCuda();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_CUDA_H_
