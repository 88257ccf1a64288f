// Turning CUDA runtime errors into absl::Status.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_CHECK_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"

namespace kernelserve::cuda {

// OK for cudaSuccess. Otherwise a status whose message reads
// "<what>: <CUDA error name>: <CUDA description>", with the code:
//   cudaErrorMemoryAllocation                          -> ResourceExhausted
//   no device, no or too old a driver, device busy    -> Unavailable
//   invalid value / configuration / device function    -> InvalidArgument
//   anything else (launch failures, illegal addresses) -> Internal
// Also clears the runtime's last-error slot, so that a handled error is not reported again by a
// later launch check. Thread-safe.
absl::Status CudaStatus(cudaError_t error, std::string_view what);

}  // namespace kernelserve::cuda

// Evaluates `expr` (a CUDA runtime call returning cudaError_t) once and returns its status from
// the enclosing function (which returns absl::Status or absl::StatusOr) when it failed.
#define KS_CUDA_RETURN_IF_ERROR(expr)                                \
  do {                                                               \
    const cudaError_t ks_cuda_error_ = (expr);                       \
    if (ks_cuda_error_ != cudaSuccess) {                             \
      return ::kernelserve::cuda::CudaStatus(ks_cuda_error_, #expr); \
    }                                                                \
  } while (0)

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_CHECK_H_
