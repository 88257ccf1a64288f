// Helpers for kernel tests: a CPU device and a run through a kernel's CPU implementation.
#ifndef KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_
#define KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_

#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve::testing {

// A CPU DeviceInfo with `threads` hardware threads.
DeviceInfo CpuDevice(int threads);

// Validates and runs `kernel`'s CPU implementation once with `config`, the way the executor
// does (Validate, ValidateData, Prepare, Launch, Fetch), on a 2-thread CPU device.
absl::StatusOr<TensorMap> RunOnCpu(const Kernel& kernel, const TensorMap& inputs,
                                   const Attributes& attrs, const KernelConfig& config);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_
