// LaunchPagedAttention's instances of head dim 128 (a file per head dim: CI compiles them in
// parallel).
#include "kernels/paged_attention/cuda/paged_attention_device.cuh"
#include "kernels/paged_attention/cuda/paged_attention_instances.h"

namespace kernelserve::cuda {

#define KS_INSTANTIATE_PAGED(DT, CT, CDT, CCT, D, WARPS)        \
  template cudaError_t LaunchPagedAttention<CT, CCT, D, WARPS>( \
      const PagedDeviceArgs& args, int num_splits, void* workspace, cudaStream_t stream);
KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(KS_INSTANTIATE_PAGED, 128)
#undef KS_INSTANTIATE_PAGED

}  // namespace kernelserve::cuda
