// The limits of the CUDA mean_pooling_bwd kernel, shared by its .cu and its config code.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LIMITS_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LIMITS_H_

#include <cstdint>

namespace kernelserve::cuda {

// Rows of dx one block writes at most (the block keeps each row's sequence in shared memory).
inline constexpr int kPoolBwdMaxRows = 256;
// Warps per block at most (1024 threads).
inline constexpr int kPoolBwdMaxWarps = 32;
// Blocks of one launch at most (gridDim.x).
inline constexpr int64_t kPoolBwdMaxBlocks = (int64_t{1} << 31) - 1;

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LIMITS_H_
