#include "kernels/flash_attention/flash_attention_bwd.h"

#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"

namespace kernelserve {

std::unique_ptr<Kernel> MakeFlashAttentionBwd() {
  auto kernel = std::make_unique<FlashAttentionBwdKernel>();
  kernel->AddImpl(MakeFlashAttentionBwdCpu());
  return kernel;
}

}  // namespace kernelserve
