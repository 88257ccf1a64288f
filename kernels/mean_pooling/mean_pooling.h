// mean_pooling and mean_pooling_bwd as the registry takes them: each kernel with every platform
// this build has.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// MeanPoolingKernel (mean_pooling_kernel.h) with its cpu platform, and its cuda platform in
// builds with CUDA.
std::unique_ptr<Kernel> MakeMeanPooling();
// MeanPoolingBwdKernel (mean_pooling_bwd_kernel.h), mean_pooling's VJP, with the same
// platforms.
std::unique_ptr<Kernel> MakeMeanPoolingBwd();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_H_
