#include "kernels/paged_attention/paged_attention.h"

#include "kernels/paged_attention/cpu/paged_attention_cpu.h"
#include "kernels/paged_attention/paged_attention_kernel.h"

namespace kernelserve {

std::unique_ptr<Kernel> MakePagedAttention() {
  auto kernel = std::make_unique<PagedAttentionKernel>();
  kernel->AddImpl(MakePagedAttentionCpu());
  return kernel;
}

}  // namespace kernelserve
