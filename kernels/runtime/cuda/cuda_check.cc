#include "kernels/runtime/cuda/cuda_check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::cuda {

absl::Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The last-error slot holds this error too for calls that set it; read it away (a sticky
  // error stays anyway, and every later call reports it).
  (void)cudaGetLastError();
  const std::string message =
      absl::StrCat(Sv(what), ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCudartUnloading:
      return absl::UnavailableError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDeviceFunction:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace kernelserve::cuda
