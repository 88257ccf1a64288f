#include "kernels/paged_attention/paged_attention.h"

#include "kernels/paged_attention/cpu/paged_attention_cpu.h"
#include "kernels/paged_attention/paged_attention_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/paged_attention/cuda/paged_attention_cuda.h"
#endif

namespace kernelserve {

std::unique_ptr<Kernel> MakePagedAttention() {
  auto kernel = std::make_unique<PagedAttentionKernel>();
  kernel->AddImpl(MakePagedAttentionCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakePagedAttentionCuda());
#endif
  return kernel;
}

}  // namespace kernelserve
