// From runtime values (dtype, form, vector width, stage count) to a compiled launcher.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DISPATCH_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DISPATCH_H_

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "kernels/mean_pooling/cuda/mean_pooling_launch.h"

namespace kernelserve::cuda {

using PoolingLaunchFn = cudaError_t (*)(const PoolingDeviceArgs& args,
                                        const PoolingLaunchShape& shape, void* workspace,
                                        cudaStream_t stream);

// The compiled LaunchMeanPooling instance for these values. `vec` is the values per lane:
// PoolVectorWidth(ItemSize(dtype), hidden). Unimplemented naming the values when no instance
// was compiled for them (a dtype other than f32/f16/bf16, a stage count outside kPoolStages,
// a vector width that is neither 1 nor 16 bytes). Thread-safe.
absl::StatusOr<PoolingLaunchFn> SelectPoolingLaunch(DType dtype, PoolingForm form, int vec,
                                                    int stages);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DISPATCH_H_
