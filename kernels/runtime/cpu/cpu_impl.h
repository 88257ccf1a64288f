// CpuImpl: what a kernel's CPU platform shares with every other: the platform, Supports (the
// reference runs every valid call) and Prepare (a run over the caller's inputs). A kernel
// supplies its run and config code as Traits.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_IMPL_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_IMPL_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve::cpu {

// Traits name what differs between the kernels:
//   using ProblemType = ...;  // the kernel's Problem
//   using Run = ...;          // Run(const ProblemType&, const TensorMap& inputs): a CpuRun
//                             // pointing into `inputs`, which outlive it
//   static KernelConfig Heuristic(const ProblemType&, const DeviceInfo&);
//   static std::vector<KernelConfig> Candidates(const ProblemType&, const DeviceInfo&);
//   static const ConfigSchema& ConfigFields();  // the platform's config schema
//   static absl::Status CheckConfig(const KernelConfig&);  // InvalidArgument; checks the
//                                                          // schema's fields first
// Thread safety: stateless; every method may run on many threads at once.
template <typename Traits>
class CpuImpl final : public PlatformImpl {
 public:
  using P = typename Traits::ProblemType;

  Platform platform() const override { return Platform::kCpu; }

  const ConfigSchema& config_schema() const override { return Traits::ConfigFields(); }

  absl::Status Supports(const Problem& /*problem*/, const DeviceInfo& /*device*/) const override {
    return absl::OkStatus();  // the reference runs every valid call
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    return Traits::Heuristic(ProblemAs<P>(problem), device);
  }

  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    return Traits::Candidates(ProblemAs<P>(problem), device);
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& /*problem*/,
                           const DeviceInfo& /*device*/) const override {
    return Traits::CheckConfig(config);
  }

  // REQUIRES: `inputs` outlive the run.
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(
      const Problem& problem, const TensorMap& inputs,
      const DeviceInfo& /*device*/) const override {
    return std::unique_ptr<PreparedRun>(
        std::make_unique<typename Traits::Run>(ProblemAs<P>(problem), inputs));
  }
};

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_CPU_IMPL_H_
