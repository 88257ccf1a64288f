#include "tests/support/kernel_run.h"

#include <memory>

namespace kernelserve::testing {

DeviceInfo CpuDevice(int threads) {
  DeviceInfo device;
  device.platform = Platform::kCpu;
  device.num_threads = threads;
  return device;
}

absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeCall(const Kernel& kernel,
                                                           const TensorSpecMap& specs,
                                                           const Attributes& params) {
  absl::StatusOr<Attributes> attrs = kernel.schema().CanonicalParams(params);
  if (!attrs.ok()) return attrs.status();
  return kernel.Analyze(specs, *attrs);
}

absl::StatusOr<TensorMap> RunOnCpu(const Kernel& kernel, const TensorMap& inputs,
                                   const Attributes& params, const KernelConfig& config) {
  absl::StatusOr<std::shared_ptr<const Problem>> problem =
      AnalyzeCall(kernel, SpecsOf(inputs), params);
  if (!problem.ok()) return problem.status();
  if (absl::Status data = kernel.schema().CheckInputData(inputs); !data.ok()) return data;
  if (absl::Status data = kernel.ValidateData(**problem, inputs); !data.ok()) return data;
  absl::StatusOr<std::unique_ptr<PreparedRun>> run =
      kernel.impl(Platform::kCpu)->Prepare(**problem, inputs, CpuDevice(2));
  if (!run.ok()) return run.status();
  absl::StatusOr<double> seconds = (*run)->Launch(config);
  if (!seconds.ok()) return seconds.status();
  if (*seconds < 0) return absl::InternalError("negative time");
  return (*run)->Fetch();
}

}  // namespace kernelserve::testing
