// Functions of the CUDA driver API found at run time: the server links the runtime only, and
// asks the installed driver for the few driver calls it needs.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_DRIVER_FUNCTION_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_DRIVER_FUNCTION_H_

namespace kernelserve::cuda {

// The driver's entry point `name` (a cu* function) of ABI `version` (12000 for the CUDA 12
// signature), or null when the driver has none or cannot be asked; the runtime's last-error
// slot is left clear. Cast it to the matching PFN_* type of <cudaTypedefs.h>. Callers keep it
// in a function-local static (one lookup a process). Thread-safe.
void* FindDriverFunction(const char* name, int version);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_DRIVER_FUNCTION_H_
