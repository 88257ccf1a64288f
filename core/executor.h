// Executor: plans one kernel call (kernel, analysis, platform, device, cache key: once) and runs
// the plan: select a config through the chain, prepare, launch, fetch; with timings.
#ifndef KERNELSERVE_CORE_EXECUTOR_H_
#define KERNELSERVE_CORE_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/config_source.h"
#include "core/device.h"
#include "core/invocation.h"
#include "core/kernel_config.h"
#include "core/policy.h"
#include "core/registry.h"
#include "core/selector_chain.h"
#include "core/tensor.h"
#include "core/timings.h"
#include "core/tuner.h"

namespace kernelserve {

class Recorder;

// Per-call options. Every field has a default.
struct ExecuteOptions {
  std::optional<KernelConfig> config;  // set = explicit override
  std::string platform;                // "", "auto", "cpu", "cuda", "cudnn"
  std::optional<int> device;           // GPU ordinal; -1 = the CPU; unset = `place` picks
  PolicyPatch policy;                  // per-call changes to the policy
  // Checked as the call runs (between tuning candidates and timed launches, and by kernels
  // between their work items); a non-OK status stops the call with that status (the caller's
  // deadline passed, it cancelled). Empty = never interrupted.
  std::function<absl::Status()> interrupt;
  // Picks the GPU of a call on a GPU platform that names no device, among `gpus` (non-empty,
  // ordinals). Empty = the first. The server picks the least loaded, ties round robin.
  std::function<int(const std::vector<int>& gpus)> place;
  // Called on the thread that runs the call before Run tunes it (a miss with autotune allowed),
  // with the host bytes the tuning holds besides the call's outputs: the tuner's copies of the
  // first launch's outputs and of a candidate's (two outputs' worth). A non-OK status fails the
  // call with it before anything is launched. Empty = nothing asked. Tune does not ask: its
  // caller counts those copies before it starts.
  std::function<absl::Status(int64_t bytes)> reserve_tuning;
  // Told where a tuning of this call stands (TuneOptions::progress), on the thread that tunes.
  // Empty = not told.
  std::function<void(const TuneProgress&)> tune_progress;
};

// A value type.
struct ExecuteResult {
  TensorMap outputs;
  KernelConfig config;
  ConfigSource source = ConfigSource::kHeuristic;
  Platform platform = Platform::kCpu;
  int device = -1;                 // GPU ordinal, -1 = CPU
  std::string device_fingerprint;  // DeviceFingerprint::Hash()
  std::string cache_key;
  Timings timings;
  std::vector<std::string> warnings;
};

// The outcome of an explicit tuning request. A value type.
struct AutotuneResult {
  Selection selection;  // selection.tune_report holds every candidate's time or error
  Platform platform = Platform::kCpu;
  int device = -1;
  std::string device_fingerprint;
};

// One call made ready to run: the kernel found, its problem analysed, the platform and device
// chosen, the cache key computed, each once. A value type; the pointers are borrowed from the
// executor (its registry and devices) and live as long as it does.
struct CallPlan {
  const Kernel* kernel = nullptr;
  std::shared_ptr<const Problem> problem;  // the kernel's analysis of the inputs and params
  Platform platform = Platform::kCpu;
  // The call named no platform ("" or "auto"): on a GPU it runs kernel->gpu_auto_impl() where
  // the kernel has one, and the invocation's platform is "auto".
  bool automatic = false;
  const PlatformImpl* impl = nullptr;       // kernel->impl(platform), or the GPU "auto" one
  const DeviceInfo* device = nullptr;       // the device that runs it
  Invocation invocation;                    // inputs, canonical attributes, platform, device
  std::string cache_key;                    // invocation.CacheKey()
  AutotunePolicy policy;                    // the effective policy
  std::optional<KernelConfig> config;       // explicit override
  std::function<absl::Status()> interrupt;  // see ExecuteOptions::interrupt
  std::function<absl::Status(int64_t bytes)> reserve_tuning;  // see ExecuteOptions
  std::function<void(const TuneProgress&)> tune_progress;     // see ExecuteOptions

  int ordinal() const { return device->ordinal; }  // -1 = the CPU
  const Attributes& attributes() const { return invocation.attributes; }
};

// Options of the executor. Every field has a default.
struct ExecutorOptions {
  AutotunePolicy policy;         // the default policy (ScopedPolicyOverride and calls change it)
  Recorder* recorder = nullptr;  // borrowed; when set, every valid call is recorded
  // Called with a GPU's ordinal before tuning candidates are timed on it; the hold it returns
  // is kept until the timing ends and should keep the process's other calls off that GPU, so
  // that each candidate's time is its own where several calls share a GPU. Called on the
  // thread that runs the call. Empty (or a null hold) = nothing held.
  std::function<std::unique_ptr<DeviceHold>(int device)> hold_device;
  // Called with a GPU's ordinal when a call waits for another call tuning the same key on that
  // GPU; the hold it returns is kept while it waits and should stop the waiting call from
  // counting against hold_device (which would otherwise wait for it: a deadlock). Empty =
  // nothing. The server sets both or neither.
  std::function<std::unique_ptr<DeviceHold>(int device)> step_aside;
};

// Thread safety: thread-safe; many calls may be planned and run at once, several per device.
class Executor {
 public:
  // Borrows `registry` and `chain`, which must outlive it. `gpus` are the GPUs this process
  // may use (empty = CPU only), indexed by ordinal.
  Executor(const KernelRegistry* registry, ConfigSelectorChain* chain, std::vector<DeviceInfo> gpus,
           ExecutorOptions options = {});

  // Plans a call of `kernel` on inputs of `specs` with `params`: finds the kernel, makes the
  // params canonical, analyses the call, resolves the platform ("auto": the best one present
  // that supports the problem; the CPU handles every valid call) and the device, and computes
  // the cache key. InvalidArgument for bad inputs, params or device; Unimplemented for a
  // platform the kernel lacks or that cannot run these inputs.
  absl::StatusOr<CallPlan> Plan(std::string_view kernel, const TensorSpecMap& specs,
                                const Attributes& params, const ExecuteOptions& options = {}) const;
  // The same call on `device` (-1 = the CPU, which then runs it on the cpu platform): no new
  // analysis. InvalidArgument for a device this process lacks; Unimplemented when the
  // platform cannot run the problem there.
  absl::StatusOr<CallPlan> Retarget(const CallPlan& plan, int device) const;

  // Runs `plan` on `inputs` (of the planned specs): selects the config through the chain,
  // prepares, launches, fetches (the outputs of `output_places` into those GPU tensors, see
  // PreparedRun::FetchInto). InvalidArgument for bad index data or override;
  // ResourceExhausted when the device runs out of memory.
  absl::StatusOr<ExecuteResult> Run(const CallPlan& plan, const TensorMap& inputs,
                                    const TensorMap& output_places = {}) const;
  // Tunes `plan` now and stores the winner (when the policy persists; a winner of a tuning that
  // the time budget cut short goes to memory only, see ConfigSelectorChain::Tune). `inputs`
  // (borrowed, may be null) supplies the data; null = random valid data of the planned specs
  // (Kernel::SynthesizeInputs). DeadlineExceeded naming the budget when it ran out before any
  // candidate ran: the caller asked for a tuning and gets none (the heuristic's config, which
  // a call uses anyway, is no answer to it).
  absl::StatusOr<AutotuneResult> Tune(const CallPlan& plan, const TensorMap* inputs) const;
  // Pins `config` for the plan's key in memory and the store (ConfigSelectorChain::Pin).
  absl::Status Pin(const CallPlan& plan, const KernelConfig& config) const;

  // Plan then Run, for callers that do not keep the plan.
  absl::StatusOr<ExecuteResult> Execute(std::string_view kernel, const TensorMap& inputs,
                                        const Attributes& params,
                                        const ExecuteOptions& options = {}) const;
  // Plan then Tune.
  absl::StatusOr<AutotuneResult> Autotune(std::string_view kernel, const TensorSpecMap& specs,
                                          const Attributes& params,
                                          const ExecuteOptions& options = {},
                                          const TensorMap* inputs = nullptr) const;

  // The policy a call on this thread starts from (options, then ScopedPolicyOverride).
  AutotunePolicy EffectivePolicy(const PolicyPatch& patch) const;

  const KernelRegistry& registry() const { return *registry_; }
  ConfigSelectorChain& chain() const { return *chain_; }
  const std::vector<DeviceInfo>& gpus() const { return gpus_; }
  const DeviceInfo& cpu() const { return cpu_; }
  const ExecutorOptions& options() const { return options_; }

 private:
  absl::StatusOr<Platform> ChoosePlatform(const Kernel& kernel, const Problem& problem,
                                          const ExecuteOptions& options) const;
  absl::StatusOr<const DeviceInfo*> ChooseDevice(Platform platform,
                                                 const ExecuteOptions& options) const;
  // options_.hold_device for the plan's GPU; null on the CPU or without the option.
  std::unique_ptr<DeviceHold> HoldDevice(const CallPlan& plan) const;
  // The chain's request for `plan`, with step_aside for its GPU (no tuning function).
  SelectRequest RequestFor(const CallPlan& plan) const;
  // Completes `plan` for its chosen device: implementation, invocation and cache key.
  absl::Status Finish(CallPlan& plan) const;

  const KernelRegistry* const registry_;
  ConfigSelectorChain* const chain_;
  const std::vector<DeviceInfo> gpus_;
  const DeviceInfo cpu_;
  const ExecutorOptions options_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_EXECUTOR_H_
