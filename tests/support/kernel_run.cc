#include "tests/support/kernel_run.h"

#include <memory>

namespace kernelserve::testing {

DeviceInfo CpuDevice(int threads) {
  DeviceInfo device;
  device.platform = Platform::kCpu;
  device.num_threads = threads;
  return device;
}

absl::StatusOr<TensorMap> RunOnCpu(const Kernel& kernel, const TensorMap& inputs,
                                   const Attributes& attrs, const KernelConfig& config) {
  absl::Status status = kernel.Validate(SpecsOf(inputs), attrs);
  if (status.ok()) status = kernel.ValidateData(inputs, attrs);
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<PreparedRun>> run =
      kernel.impl(Platform::kCpu)->Prepare(inputs, attrs, CpuDevice(2));
  if (!run.ok()) return run.status();
  absl::StatusOr<double> seconds = (*run)->Launch(config);
  if (!seconds.ok()) return seconds.status();
  if (*seconds < 0) return absl::InternalError("negative time");
  return (*run)->Fetch();
}

}  // namespace kernelserve::testing
