#include "kernels/runtime/cpu/cpu_run.h"

#include <chrono>

#include "core/status_macros.h"

namespace kernelserve::cpu {

void* CpuRun::AddOutputAt(const std::string& name, DType dtype, const Shape& shape) {
  outputs_.push_back(Output{name, Tensor::Empty(dtype, shape)});
  return outputs_.back().tensor.data();
}

absl::StatusOr<double> CpuRun::TimedLaunch(absl::FunctionRef<absl::Status()> kernel) {
  launched_ = false;  // a launch that fails part way leaves the outputs partly written
  const auto start = std::chrono::steady_clock::now();
  KS_RETURN_IF_ERROR(kernel());
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  launched_ = true;
  return elapsed.count();
}

absl::StatusOr<TensorMap> CpuRun::Outputs(bool take) {
  if (!launched_) return absl::FailedPreconditionError("Fetch before a successful Launch");
  launched_ = !take;
  TensorMap outputs;
  for (Output& output : outputs_) outputs.emplace(output.name, CopyOrTake(output.tensor, take));
  return outputs;
}

}  // namespace kernelserve::cpu
