// Helpers for kernel tests: a CPU device and a run through a kernel's CPU implementation.
#ifndef KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_
#define KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve::testing {

// A CPU DeviceInfo with `threads` hardware threads.
DeviceInfo CpuDevice(int threads);

// The kernel's analysis of a call, the way the executor makes it (params made canonical by the
// schema, then Analyze).
absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeCall(const Kernel& kernel,
                                                           const TensorSpecMap& specs,
                                                           const Attributes& params);

// Runs `kernel`'s CPU implementation once with `config`, the way the executor does (analysis,
// CheckInputData, ValidateData, Prepare, Launch, Fetch), on a 2-thread CPU device.
absl::StatusOr<TensorMap> RunOnCpu(const Kernel& kernel, const TensorMap& inputs,
                                   const Attributes& params, const KernelConfig& config);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_KERNEL_RUN_H_
