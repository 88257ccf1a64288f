#include "kernels/runtime/cuda/driver_function.h"

#include <cuda_runtime_api.h>

namespace kernelserve::cuda {

void* FindDriverFunction(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, static_cast<unsigned int>(version),
                                       cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

}  // namespace kernelserve::cuda
