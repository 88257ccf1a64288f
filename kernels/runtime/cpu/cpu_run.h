// CpuRun: what every CPU PreparedRun shares. A kernel's CPU run derives from it: its
// constructor declares the outputs (AddOutput) and points the kernel's args at the inputs; its
// Launch runs the kernel through TimedLaunch. The outputs as host tensors, the launch flag, the
// steady-clock timing and the fetch guard live here once.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_RUN_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_RUN_H_

#include <deque>
#include <functional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve::cpu {

// Thread safety: one thread at a time (see PreparedRun).
class CpuRun : public PreparedRun {
 public:
  CpuRun(const CpuRun&) = delete;
  CpuRun& operator=(const CpuRun&) = delete;

  // Copies of the outputs of the last successful launch. FailedPrecondition before one.
  absl::StatusOr<TensorMap> Fetch() override { return Outputs(/*take=*/false); }
  // The outputs move out (the run is done with them) when `places` is empty; else FetchInto.
  absl::StatusOr<TensorMap> TakeOutputs(const TensorMap& places) override {
    return places.empty() ? Outputs(/*take=*/true) : FetchInto(places);
  }

 protected:
  CpuRun() = default;

  // Allocates output `name`, a host tensor of `dtype` and `shape`, for Fetch and TakeOutputs,
  // and stores its address in `*address`, where the kernel's args read it. The address stays
  // valid for the run's life.
  template <typename T>
  void AddOutput(const std::string& name, DType dtype, const Shape& shape, T** address) {
    *address = static_cast<T*>(AddOutputAt(name, dtype, shape));
  }
  // Runs `kernel` and returns its steady-clock seconds. The outputs are fetchable once it
  // succeeds; a kernel that fails part way leaves them partly written and unfetchable.
  absl::StatusOr<double> TimedLaunch(absl::FunctionRef<absl::Status()> kernel);
  // The run's interrupt for the kernel's args: null when none is set.
  const std::function<absl::Status()>* InterruptOrNull() const {
    return interrupt() ? &interrupt() : nullptr;
  }

 private:
  struct Output {
    std::string name;
    Tensor tensor;
  };

  void* AddOutputAt(const std::string& name, DType dtype, const Shape& shape);
  // The outputs of the last launch, copied or moved out (CopyOrTake).
  absl::StatusOr<TensorMap> Outputs(bool take);

  // A deque: adding an output moves none of the others (a small tensor's bytes live inside it).
  std::deque<Output> outputs_;
  bool launched_ = false;
};

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_RUN_H_
