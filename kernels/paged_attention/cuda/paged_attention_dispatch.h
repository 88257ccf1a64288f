// From runtime values (dtypes, head dim, warp count) to a compiled paged attention launcher.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DISPATCH_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DISPATCH_H_

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "kernels/paged_attention/cuda/paged_attention_launch.h"

namespace kernelserve::cuda {

using PagedAttentionLaunchFn = cudaError_t (*)(const PagedDeviceArgs& args, int num_splits,
                                               void* workspace, cudaStream_t stream);
using PagedAppendLaunchFn = cudaError_t (*)(const PagedAppendArgs& args, cudaStream_t stream);

// The compiled LaunchPagedAttention instance for these values (`dtype` of q and out,
// `cache_dtype` of the caches). Unimplemented naming the values and the compiled set when none
// was compiled for them. Thread-safe.
absl::StatusOr<PagedAttentionLaunchFn> SelectPagedAttentionLaunch(DType dtype, DType cache_dtype,
                                                                  int64_t head_dim, int num_warps);

// LaunchPagedAppend for new keys and values of `dtype` (f16, bf16) into caches of `cache_dtype`
// (dtype itself, f8_e4m3, f8_e5m2); Unimplemented otherwise. Thread-safe.
absl::StatusOr<PagedAppendLaunchFn> SelectPagedAppendLaunch(DType dtype, DType cache_dtype);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DISPATCH_H_
