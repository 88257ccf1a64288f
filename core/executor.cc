#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/recorder.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

int64_t Micros(double seconds) { return static_cast<int64_t>(seconds * 1e6 + 0.5); }

TuneOptions TuneOptionsOf(const CallPlan& plan) {
  TuneOptions tune;
  tune.warmup = plan.policy.warmup;
  tune.iters = plan.policy.iters;
  tune.time_budget = plan.policy.time_budget;
  tune.interrupt = plan.interrupt;
  tune.progress = plan.tune_progress;
  return tune;
}

// The host bytes of the tuner's copies of a call's outputs (core/tuner.h: the first launch's
// outputs, kept to compare with, and a candidate's), saturating at INT64_MAX.
int64_t TunerCopyBytes(const Kernel& kernel, const Problem& problem) {
  const int64_t total = SpecsBytes(kernel.OutputSpecs(problem));
  return total > INT64_MAX / 2 ? INT64_MAX : 2 * total;
}

bool Automatic(std::string_view platform) { return platform.empty() || platform == "auto"; }

// The chain's request for `plan` (no tuning function).
SelectRequest RequestOf(const CallPlan& plan) {
  SelectRequest request;
  request.kernel = plan.kernel;
  request.impl = plan.impl;
  request.problem = plan.problem.get();
  request.invocation = &plan.invocation;
  request.cache_key = &plan.cache_key;
  request.device = plan.device;
  request.override_config = plan.config;
  request.policy = plan.policy;
  return request;
}

// The implementation of `platform` for a call: the kernel's GPU "auto" one where the call named
// no platform and the kernel has one, else the platform's own (nullptr: none).
const PlatformImpl* ImplFor(const Kernel& kernel, Platform platform, bool automatic) {
  return automatic && platform == Platform::kCuda ? kernel.GpuAuto() : kernel.impl(platform);
}

// The platform that ran `config`: the one it names (the GPU "auto" implementation runs the
// configs of several platforms), else the plan's.
Platform RanOn(const CallPlan& plan, const KernelConfig& config) {
  if (config.platform.empty()) return plan.platform;
  absl::StatusOr<Platform> named = ParsePlatform(config.platform);
  return named.ok() ? *named : plan.platform;
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

absl::StatusOr<Platform> Executor::ChoosePlatform(const Kernel& kernel, const Problem& problem,
                                                  const ExecuteOptions& options) const {
  std::string_view requested = options.platform;
  const bool wants_cpu_device = options.device.has_value() && *options.device == -1;
  if (wants_cpu_device && Automatic(requested)) requested = "cpu";
  KS_ASSIGN_OR_RETURN(Platform platform, kernel.ResolvePlatform(requested, !gpus_.empty()));
  if (platform == Platform::kCpu || !Automatic(requested)) return platform;
  // "auto" means the best platform that handles the problem: the CPU reference handles every
  // valid call (f32 attention, head dims without a GPU kernel...).
  const size_t probe = static_cast<size_t>(std::max(0, options.device.value_or(0)));
  if (probe < gpus_.size() &&
      !ImplFor(kernel, platform, /*automatic=*/true)->Supports(problem, gpus_[probe]).ok()) {
    return Platform::kCpu;
  }
  return platform;
}

absl::StatusOr<const DeviceInfo*> Executor::ChooseDevice(Platform platform,
                                                         const ExecuteOptions& options) const {
  if (platform == Platform::kCpu) {
    if (options.device.has_value() && *options.device != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", *options.device, " is a GPU but the call runs on the cpu"));
    }
    return &cpu_;
  }
  int ordinal = 0;
  if (options.device.has_value()) {
    ordinal = *options.device;
  } else if (options.place && !gpus_.empty()) {
    std::vector<int> ordinals;
    for (const DeviceInfo& gpu : gpus_) ordinals.push_back(gpu.ordinal);
    ordinal = options.place(ordinals);
  }
  if (ordinal < 0 || ordinal >= static_cast<int>(gpus_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", ordinal, " does not exist: this process has ", gpus_.size(),
                     " GPU(s)", gpus_.empty() ? "" : absl::StrCat(" (0..", gpus_.size() - 1, ")")));
  }
  return &gpus_[static_cast<size_t>(ordinal)];
}

absl::Status Executor::Finish(CallPlan& plan) const {
  plan.impl = ImplFor(*plan.kernel, plan.platform, plan.automatic);
  if (plan.impl == nullptr) {
    return absl::UnimplementedError(absl::StrCat("kernel '", plan.kernel->id(), "' has no '",
                                                 Sv(PlatformName(plan.platform)),
                                                 "' implementation"));
  }
  KS_RETURN_IF_ERROR(plan.impl->Supports(*plan.problem, *plan.device));
  plan.invocation.platform = plan.impl == plan.kernel->gpu_auto_impl()
                                 ? std::string("auto")
                                 : std::string(PlatformName(plan.platform));
  plan.invocation.device = plan.device->fingerprint;
  plan.cache_key = plan.invocation.CacheKey();
  return absl::OkStatus();
}

absl::StatusOr<CallPlan> Executor::Plan(std::string_view kernel_name, const TensorSpecMap& specs,
                                        const Attributes& params,
                                        const ExecuteOptions& options) const {
  CallPlan plan;
  KS_ASSIGN_OR_RETURN(plan.kernel, registry_->Find(kernel_name));
  KS_ASSIGN_OR_RETURN(Attributes attrs, plan.kernel->schema().CanonicalParams(params));
  KS_ASSIGN_OR_RETURN(plan.problem, plan.kernel->Analyze(specs, attrs));
  KS_ASSIGN_OR_RETURN(plan.platform, ChoosePlatform(*plan.kernel, *plan.problem, options));
  plan.automatic = Automatic(options.platform);
  KS_ASSIGN_OR_RETURN(plan.device, ChooseDevice(plan.platform, options));
  plan.invocation.kernel_id = plan.kernel->id();
  plan.invocation.inputs = specs;
  plan.invocation.attributes = std::move(attrs);
  plan.policy = EffectivePolicy(options.policy);
  plan.config = options.config;
  plan.interrupt = options.interrupt;
  plan.reserve_tuning = options.reserve_tuning;
  plan.tune_progress = options.tune_progress;
  KS_RETURN_IF_ERROR(Finish(plan));
  return plan;
}

absl::StatusOr<CallPlan> Executor::Retarget(const CallPlan& plan, int device) const {
  CallPlan moved = plan;
  if (device == -1) {
    moved.platform = Platform::kCpu;
    moved.device = &cpu_;
  } else {
    if (moved.platform == Platform::kCpu) {
      KS_ASSIGN_OR_RETURN(moved.platform, plan.kernel->ResolvePlatform("auto", !gpus_.empty()));
      moved.automatic = true;
    }
    ExecuteOptions on;
    on.device = device;
    KS_ASSIGN_OR_RETURN(moved.device, ChooseDevice(moved.platform, on));
  }
  KS_RETURN_IF_ERROR(Finish(moved));
  return moved;
}

SelectRequest Executor::RequestFor(const CallPlan& plan) const {
  SelectRequest request = RequestOf(plan);
  if (plan.ordinal() >= 0 && options_.step_aside) {
    request.step_aside = [this, device = plan.ordinal()] { return options_.step_aside(device); };
  }
  return request;
}

std::unique_ptr<DeviceHold> Executor::HoldDevice(const CallPlan& plan) const {
  if (plan.ordinal() < 0 || !options_.hold_device) return nullptr;
  return options_.hold_device(plan.ordinal());
}

absl::StatusOr<ExecuteResult> Executor::Run(const CallPlan& plan, const TensorMap& inputs,
                                            const TensorMap& output_places) const {
  const Clock::time_point start = Clock::now();
  KS_RETURN_IF_ERROR(plan.kernel->schema().CheckInputData(inputs));
  KS_RETURN_IF_ERROR(plan.kernel->ValidateData(*plan.problem, inputs));
  std::unique_ptr<PreparedRun> run;
  auto prepare = [&]() -> absl::Status {
    if (run != nullptr) return absl::OkStatus();
    KS_ASSIGN_OR_RETURN(run, plan.impl->Prepare(*plan.problem, inputs, *plan.device));
    run->set_interrupt(plan.interrupt);
    return absl::OkStatus();
  };
  SelectRequest request = RequestFor(plan);
  request.tune = [&](const KernelConfig& heuristic,
                     const std::vector<KernelConfig>& candidates) -> absl::StatusOr<TuneReport> {
    if (plan.reserve_tuning) {
      KS_RETURN_IF_ERROR(plan.reserve_tuning(TunerCopyBytes(*plan.kernel, *plan.problem)));
    }
    KS_RETURN_IF_ERROR(prepare());
    const std::unique_ptr<DeviceHold> hold = HoldDevice(plan);
    return kernelserve::Autotune(*run, heuristic, candidates, TuneOptionsOf(plan));
  };
  const Clock::time_point select_start = Clock::now();
  KS_ASSIGN_OR_RETURN(Selection selection, chain_->Select(request));
  ExecuteResult result;
  result.timings.select_us = MicrosSince(select_start);

  KS_RETURN_IF_ERROR(prepare());
  KS_RETURN_IF_ERROR(run->BindOutputs(output_places));
  result.timings.h2d_us = Micros(run->upload_seconds());
  KS_ASSIGN_OR_RETURN(double kernel_seconds, run->Launch(selection.config));
  result.timings.kernel_us = Micros(kernel_seconds);
  result.timings.launch_us = Micros(run->launch_seconds());
  const Clock::time_point fetch_start = Clock::now();
  KS_ASSIGN_OR_RETURN(result.outputs, run->TakeOutputs(output_places));
  result.timings.d2h_us = MicrosSince(fetch_start);

  if (options_.recorder != nullptr) {
    ExecuteOptions recorded;
    recorded.platform = plan.invocation.platform;
    recorded.device = plan.ordinal();
    options_.recorder->Record(RecordedCall{plan.kernel->name(), plan.invocation.inputs,
                                           plan.attributes(), recorded, plan.cache_key, 0});
  }
  result.platform = RanOn(plan, selection.config);
  result.config = std::move(selection.config);
  result.source = selection.source;
  result.device = plan.ordinal();
  result.device_fingerprint = plan.invocation.device.Hash();
  result.cache_key = plan.cache_key;
  result.warnings = std::move(selection.warnings);
  result.timings.total_us = MicrosSince(start);
  return result;
}

absl::StatusOr<AutotuneResult> Executor::Tune(const CallPlan& plan, const TensorMap* inputs) const {
  TensorMap synthesized;
  if (inputs == nullptr) {
    KS_RETURN_IF_ERROR(plan.interrupt ? plan.interrupt() : absl::OkStatus());
    KS_ASSIGN_OR_RETURN(synthesized,
                        plan.kernel->SynthesizeInputs(*plan.problem, plan.invocation.inputs,
                                                      /*seed=*/1));
    inputs = &synthesized;
  }
  KS_RETURN_IF_ERROR(plan.kernel->schema().CheckInputData(*inputs));
  KS_RETURN_IF_ERROR(plan.kernel->ValidateData(*plan.problem, *inputs));
  SelectRequest request = RequestFor(plan);
  request.override_config.reset();
  request.tune = [&](const KernelConfig& heuristic,
                     const std::vector<KernelConfig>& candidates) -> absl::StatusOr<TuneReport> {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run,
                        plan.impl->Prepare(*plan.problem, *inputs, *plan.device));
    run->set_interrupt(plan.interrupt);
    const std::unique_ptr<DeviceHold> hold = HoldDevice(plan);
    return kernelserve::Autotune(*run, heuristic, candidates, TuneOptionsOf(plan));
  };
  AutotuneResult result;
  KS_ASSIGN_OR_RETURN(result.selection, chain_->Tune(request));
  if (const std::optional<TuneReport>& report = result.selection.tune_report;
      report.has_value() && report->budget_reached && report->candidates_run == 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("the tuning time budget of ", absl::FormatDuration(plan.policy.time_budget),
                     " ran out before any of the ", report->candidates.size(),
                     " candidates was timed (the heuristic config's reference run took ",
                     absl::FormatDuration(absl::Trunc(absl::Seconds(report->elapsed_seconds),
                                                      absl::Microseconds(100))),
                     "); give a larger time budget"));
  }
  result.platform = RanOn(plan, result.selection.config);
  result.device = plan.ordinal();
  result.device_fingerprint = plan.invocation.device.Hash();
  return result;
}

absl::Status Executor::Pin(const CallPlan& plan, const KernelConfig& config) const {
  return chain_->Pin(RequestOf(plan), config);
}

absl::StatusOr<ExecuteResult> Executor::Execute(std::string_view kernel, const TensorMap& inputs,
                                                const Attributes& params,
                                                const ExecuteOptions& options) const {
  KS_ASSIGN_OR_RETURN(CallPlan plan, Plan(kernel, SpecsOf(inputs), params, options));
  return Run(plan, inputs);
}

absl::StatusOr<AutotuneResult> Executor::Autotune(std::string_view kernel,
                                                  const TensorSpecMap& specs,
                                                  const Attributes& params,
                                                  const ExecuteOptions& options,
                                                  const TensorMap* inputs) const {
  KS_ASSIGN_OR_RETURN(CallPlan plan, Plan(kernel, specs, params, options));
  return Tune(plan, inputs);
}

}  // namespace kernelserve
