#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/recorder.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

int64_t Micros(double seconds) { return static_cast<int64_t>(seconds * 1e6 + 0.5); }

TuneOptions TuneOptionsOf(const AutotunePolicy& policy, const ExecuteOptions& options) {
  TuneOptions tune;
  tune.warmup = policy.warmup;
  tune.iters = policy.iters;
  tune.time_budget = policy.time_budget;
  tune.interrupt = options.interrupt;
  return tune;
}

// True when `platform`'s implementation can run these inputs on `device` with the kernel's
// heuristic config.
bool RunsOn(const Kernel& kernel, Platform platform, const TensorSpecMap& specs,
            const Attributes& attrs, const DeviceInfo& device) {
  const PlatformImpl* impl = kernel.impl(platform);
  return impl != nullptr &&
         impl->Supports(kernel.HeuristicConfig(specs, attrs, device), specs, device);
}

}  // namespace

Executor::Executor(const KernelRegistry* registry, ConfigSelectorChain* chain,
                   std::vector<DeviceInfo> gpus, ExecutorOptions options)
    : registry_(registry),
      chain_(chain),
      gpus_(std::move(gpus)),
      cpu_(CpuDeviceInfo()),
      options_(std::move(options)) {}

AutotunePolicy Executor::EffectivePolicy(const PolicyPatch& patch) const {
  AutotunePolicy policy = options_.policy;
  if (std::optional<AutotunePolicy> scoped = ScopedPolicyOverride::Current()) policy = *scoped;
  return patch.ApplyTo(policy);
}

absl::StatusOr<Platform> Executor::ChoosePlatform(const Kernel& kernel, const TensorSpecMap& specs,
                                                  const Attributes& attrs,
                                                  const ExecuteOptions& options,
                                                  bool gpu_present) const {
  std::string_view requested = options.platform;
  const bool wants_cpu_device = options.device.has_value() && *options.device == -1;
  if (wants_cpu_device && (requested.empty() || requested == "auto")) requested = "cpu";
  KS_ASSIGN_OR_RETURN(Platform platform, kernel.ResolvePlatform(requested, gpu_present));
  const bool automatic = requested.empty() || requested == "auto";
  const size_t probe = static_cast<size_t>(std::max(0, options.device.value_or(0)));
  if (automatic && platform != Platform::kCpu && probe < gpus_.size() &&
      kernel.Validate(specs, attrs).ok() && !RunsOn(kernel, platform, specs, attrs, gpus_[probe])) {
    // "auto" means the best platform that handles these inputs: the CPU reference handles
    // every valid call (f32 attention, head dims without a GPU kernel...).
    platform = Platform::kCpu;
  }
  return platform;
}

absl::StatusOr<Executor::Plan> Executor::MakePlan(std::string_view kernel_name,
                                                  const TensorSpecMap& specs,
                                                  const Attributes& attrs,
                                                  const ExecuteOptions& options) const {
  Plan plan;
  KS_ASSIGN_OR_RETURN(plan.kernel, registry_->Find(kernel_name));
  KS_RETURN_IF_ERROR(plan.kernel->Validate(specs, attrs));
  KS_ASSIGN_OR_RETURN(plan.platform,
                      ChoosePlatform(*plan.kernel, specs, attrs, options, !gpus_.empty()));
  if (plan.platform == Platform::kCpu) {
    if (options.device.has_value() && *options.device != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", *options.device, " is a GPU but the call runs on the cpu"));
    }
    plan.device = &cpu_;
  } else {
    const int ordinal = options.device.value_or(0);
    if (ordinal < 0 || ordinal >= static_cast<int>(gpus_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", ordinal, " does not exist: this process has ", gpus_.size(), " GPU(s)",
          gpus_.empty() ? "" : absl::StrCat(" (0..", gpus_.size() - 1, ")")));
    }
    plan.device = &gpus_[static_cast<size_t>(ordinal)];
  }
  plan.invocation.kernel_id = plan.kernel->id();
  plan.invocation.inputs = specs;
  plan.invocation.attributes = attrs;
  plan.invocation.platform = std::string(PlatformName(plan.platform));
  plan.invocation.device = plan.device->fingerprint;
  plan.policy = EffectivePolicy(options.policy);
  return plan;
}

absl::StatusOr<Invocation> Executor::Describe(std::string_view kernel, const TensorSpecMap& inputs,
                                              const Attributes& attrs,
                                              const ExecuteOptions& options) const {
  KS_ASSIGN_OR_RETURN(Plan plan, MakePlan(kernel, inputs, attrs, options));
  return plan.invocation;
}

absl::StatusOr<ExecuteResult> Executor::Execute(std::string_view kernel, const TensorMap& inputs,
                                                const Attributes& attrs,
                                                const ExecuteOptions& options) const {
  const Clock::time_point start = Clock::now();
  KS_ASSIGN_OR_RETURN(Plan plan, MakePlan(kernel, SpecsOf(inputs), attrs, options));
  KS_RETURN_IF_ERROR(plan.kernel->ValidateData(inputs, attrs));
  PlatformImpl* impl = plan.kernel->impl(plan.platform);

  std::unique_ptr<PreparedRun> run;
  auto prepare = [&]() -> absl::Status {
    if (run != nullptr) return absl::OkStatus();
    KS_ASSIGN_OR_RETURN(run, impl->Prepare(inputs, attrs, *plan.device));
    run->set_interrupt(options.interrupt);
    return absl::OkStatus();
  };
  SelectRequest request;
  request.kernel = plan.kernel;
  request.invocation = &plan.invocation;
  request.device = plan.device;
  request.override_config = options.config;
  request.policy = plan.policy;
  request.tune = [&](const KernelConfig& heuristic,
                     const std::vector<KernelConfig>& candidates) -> absl::StatusOr<TuneReport> {
    KS_RETURN_IF_ERROR(prepare());
    return kernelserve::Autotune(*run, heuristic, candidates, TuneOptionsOf(plan.policy, options));
  };
  const Clock::time_point select_start = Clock::now();
  KS_ASSIGN_OR_RETURN(Selection selection, chain_->Select(request));
  ExecuteResult result;
  result.timings.select_us = MicrosSince(select_start);

  KS_RETURN_IF_ERROR(prepare());
  result.timings.h2d_us = Micros(run->upload_seconds());
  KS_ASSIGN_OR_RETURN(double kernel_seconds, run->Launch(selection.config));
  result.timings.kernel_us = Micros(kernel_seconds);
  const Clock::time_point fetch_start = Clock::now();
  KS_ASSIGN_OR_RETURN(result.outputs, run->Fetch());
  result.timings.d2h_us = MicrosSince(fetch_start);

  if (options_.recorder != nullptr) {
    options_.recorder->Record(RecordedCall{std::string(plan.kernel->name()), plan.invocation.inputs,
                                           attrs, options, selection.cache_key, 0});
  }
  result.config = std::move(selection.config);
  result.source = selection.source;
  result.platform = plan.platform;
  result.device = plan.device->ordinal;
  result.device_fingerprint = plan.invocation.device.Hash();
  result.cache_key = std::move(selection.cache_key);
  result.warnings = std::move(selection.warnings);
  result.timings.total_us = MicrosSince(start);
  return result;
}

absl::StatusOr<AutotuneResult> Executor::Autotune(std::string_view kernel,
                                                  const TensorSpecMap& specs,
                                                  const Attributes& attrs,
                                                  const ExecuteOptions& options,
                                                  const TensorMap* inputs) const {
  KS_ASSIGN_OR_RETURN(Plan plan, MakePlan(kernel, specs, attrs, options));
  TensorMap synthesized;
  if (inputs == nullptr) {
    KS_ASSIGN_OR_RETURN(synthesized, plan.kernel->SynthesizeInputs(specs, attrs, /*seed=*/1));
    inputs = &synthesized;
  }
  KS_RETURN_IF_ERROR(plan.kernel->ValidateData(*inputs, attrs));
  PlatformImpl* impl = plan.kernel->impl(plan.platform);
  SelectRequest request;
  request.kernel = plan.kernel;
  request.invocation = &plan.invocation;
  request.device = plan.device;
  request.policy = plan.policy;
  request.tune = [&](const KernelConfig& heuristic,
                     const std::vector<KernelConfig>& candidates) -> absl::StatusOr<TuneReport> {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run,
                        impl->Prepare(*inputs, attrs, *plan.device));
    run->set_interrupt(options.interrupt);
    return kernelserve::Autotune(*run, heuristic, candidates, TuneOptionsOf(plan.policy, options));
  };
  AutotuneResult result;
  KS_ASSIGN_OR_RETURN(result.selection, chain_->Tune(request));
  result.platform = plan.platform;
  result.device = plan.device->ordinal;
  result.device_fingerprint = plan.invocation.device.Hash();
  return result;
}

}  // namespace kernelserve
