// CudaImpl: what a kernel's CUDA platform shares with every other: the device checks of
// Supports and Prepare, and Prepare itself (the calling thread's resources, the run, its Init).
// A kernel supplies its run and config code as Traits. The checks are free functions too, for
// platforms whose Supports or Prepare do more than this template does.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IMPL_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IMPL_H_

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/status_macros.h"
#include "kernels/runtime/cuda/cuda_resources.h"

namespace kernelserve::cuda {

// OK when `device` is a CUDA GPU; else Unimplemented "<label> (<platform>): the device is not a
// CUDA GPU", `platform` being the refusing platform's. For Supports.
absl::Status CheckCudaDevice(std::string_view label, Platform platform, const DeviceInfo& device);

// OK when `device` is a CUDA device with an ordinal; else InvalidArgument "<label>
// (<platform>): expected a CUDA device, got <its platform> ordinal <its ordinal>". For Prepare.
absl::Status CheckPrepareDevice(std::string_view label, Platform platform,
                                const DeviceInfo& device);

// Prepare of a CUDA platform `impl`: CheckPrepareDevice, impl.Supports, then a Run made on the
// calling thread's resources of the device and initialised from `inputs`.
// Run: Run(const P&, const DeviceInfo&, DeviceThreadResources*) and
// absl::Status Init(const TensorMap&); a PreparedRun. REQUIRES: `problem` is a P.
template <typename Run, typename P>
absl::StatusOr<std::unique_ptr<PreparedRun>> PrepareCudaRun(const PlatformImpl& impl,
                                                            std::string_view label,
                                                            const Problem& problem,
                                                            const TensorMap& inputs,
                                                            const DeviceInfo& device) {
  KS_RETURN_IF_ERROR(CheckPrepareDevice(label, impl.platform(), device));
  KS_RETURN_IF_ERROR(impl.Supports(problem, device));
  KS_ASSIGN_OR_RETURN(DeviceThreadResources * resources, ThisThreadResources(device.ordinal));
  auto run = std::make_unique<Run>(ProblemAs<P>(problem), device, resources);
  KS_RETURN_IF_ERROR(run->Init(inputs));
  return std::unique_ptr<PreparedRun>(std::move(run));
}

// Traits name what differs between the kernels:
//   using ProblemType = ...;  // the kernel's Problem
//   using Run = ...;          // as PrepareCudaRun takes it
//   static constexpr const char* kLabel;  // the kernel in messages
//   static absl::Status Supports(const ProblemType&);  // Unimplemented: what the kernels lack
//   static KernelConfig Heuristic(const ProblemType&, const DeviceInfo&);
//   static std::vector<KernelConfig> Candidates(const ProblemType&, const DeviceInfo&);
//   static const ConfigSchema& ConfigFields();  // the platform's config schema
//   static absl::Status CheckConfig(const KernelConfig&, const ProblemType&);  // InvalidArgument;
//                                                 // checks the schema's fields first
// Thread safety: stateless; every method may run on many threads at once.
template <typename Traits>
class CudaImpl final : public PlatformImpl {
 public:
  using P = typename Traits::ProblemType;

  Platform platform() const override { return Platform::kCuda; }

  const ConfigSchema& config_schema() const override { return Traits::ConfigFields(); }

  absl::Status Supports(const Problem& problem, const DeviceInfo& device) const override {
    KS_RETURN_IF_ERROR(CheckCudaDevice(Traits::kLabel, platform(), device));
    return Traits::Supports(ProblemAs<P>(problem));
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    return Traits::Heuristic(ProblemAs<P>(problem), device);
  }

  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    return Traits::Candidates(ProblemAs<P>(problem), device);
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                           const DeviceInfo& /*device*/) const override {
    return Traits::CheckConfig(config, ProblemAs<P>(problem));
  }

  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo& device) const override {
    return PrepareCudaRun<typename Traits::Run, P>(*this, Traits::kLabel, problem, inputs, device);
  }
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_IMPL_H_
