#include "kernels/mean_pooling/mean_pooling.h"

#include "kernels/mean_pooling/cpu/mean_pooling_bwd_cpu.h"
#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"
#include "kernels/mean_pooling/mean_pooling_bwd_kernel.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#ifdef KERNELSERVE_WITH_CUDA
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_cuda.h"
#include "kernels/mean_pooling/cuda/mean_pooling_cuda.h"
#endif

namespace kernelserve {

std::unique_ptr<Kernel> MakeMeanPooling() {
  auto kernel = std::make_unique<MeanPoolingKernel>();
  kernel->AddImpl(MakeMeanPoolingCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakeMeanPoolingCuda());
#endif
  return kernel;
}

std::unique_ptr<Kernel> MakeMeanPoolingBwd() {
  auto kernel = std::make_unique<MeanPoolingBwdKernel>();
  kernel->AddImpl(MakeMeanPoolingBwdCpu());
#ifdef KERNELSERVE_WITH_CUDA
  kernel->AddImpl(MakeMeanPoolingBwdCuda());
#endif
  return kernel;
}

}  // namespace kernelserve
