// Executor: runs one kernel call end to end: validate, resolve platform and device, select a
// config through the chain, prepare, launch, fetch; with timings.
#ifndef KERNELSERVE_CORE_EXECUTOR_H_
#define KERNELSERVE_CORE_EXECUTOR_H_

#include <cstdint>
#include <functional>
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
#include "core/tuner.h"

namespace kernelserve {

class Recorder;

// Per-call options. Every field has a default.
struct ExecuteOptions {
  std::optional<KernelConfig> config;  // set = explicit override
  std::string platform;                // "", "auto", "cpu", "cuda", "cudnn"
  std::optional<int> device;           // GPU ordinal; -1 = the CPU; unset = GPU 0 or the CPU
  PolicyPatch policy;                  // per-call changes to the policy
  // Checked as the call runs (between tuning candidates and timed launches, and by kernels
  // between their work items); a non-OK status stops the call with that status (the caller's
  // deadline passed, it cancelled). Empty = never interrupted.
  std::function<absl::Status()> interrupt;
};

// Microseconds spent in each phase of a call.
struct Timings {
  int64_t select_us = 0;  // config selection (tuning included when it ran)
  int64_t h2d_us = 0;     // inputs to the device
  int64_t kernel_us = 0;  // the kernel, by the platform's timer
  int64_t d2h_us = 0;     // outputs back to the host
  int64_t total_us = 0;   // the whole Execute call
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

// Options of the executor. Every field has a default.
struct ExecutorOptions {
  AutotunePolicy policy;         // the default policy (ScopedPolicyOverride and calls change it)
  Recorder* recorder = nullptr;  // borrowed; when set, every valid call is recorded
};

// Thread safety: thread-safe; Execute may run on many threads at once (one per device).
class Executor {
 public:
  // Borrows `registry` and `chain`, which must outlive it. `gpus` are the GPUs this process
  // may use (empty = CPU only), indexed by ordinal.
  Executor(const KernelRegistry* registry, ConfigSelectorChain* chain, std::vector<DeviceInfo> gpus,
           ExecutorOptions options = {});

  // Runs `kernel` on `inputs`. InvalidArgument for bad inputs, attributes, device or override;
  // Unimplemented for a platform without an implementation; ResourceExhausted when the device
  // runs out of memory.
  absl::StatusOr<ExecuteResult> Execute(std::string_view kernel, const TensorMap& inputs,
                                        const Attributes& attrs,
                                        const ExecuteOptions& options = {}) const;
  // Tunes `kernel` for inputs of `specs` now and stores the winner (when the policy persists).
  // `inputs` (borrowed, may be null) supplies the data; null = random valid data of `specs`
  // (Kernel::SynthesizeInputs). REQUIRES: inputs, when set, match `specs`.
  absl::StatusOr<AutotuneResult> Autotune(std::string_view kernel, const TensorSpecMap& specs,
                                          const Attributes& attrs,
                                          const ExecuteOptions& options = {},
                                          const TensorMap* inputs = nullptr) const;

  // The invocation a call would make (for PutConfig/ListConfigs and recording).
  absl::StatusOr<Invocation> Describe(std::string_view kernel, const TensorSpecMap& inputs,
                                      const Attributes& attrs,
                                      const ExecuteOptions& options = {}) const;

  // The platform a call runs on: the requested one, or for "auto"/"" the best one present
  // (`gpu_present`) whose implementation runs these inputs, the CPU otherwise. A device of -1
  // asks for the CPU. InvalidArgument for an unknown platform, Unimplemented for one the
  // kernel lacks.
  absl::StatusOr<Platform> ChoosePlatform(const Kernel& kernel, const TensorSpecMap& specs,
                                          const Attributes& attrs, const ExecuteOptions& options,
                                          bool gpu_present) const;

  // The policy a call on this thread starts from (options, then ScopedPolicyOverride).
  AutotunePolicy EffectivePolicy(const PolicyPatch& patch) const;

  const KernelRegistry& registry() const { return *registry_; }
  ConfigSelectorChain& chain() const { return *chain_; }
  const std::vector<DeviceInfo>& gpus() const { return gpus_; }
  const DeviceInfo& cpu() const { return cpu_; }
  const ExecutorOptions& options() const { return options_; }

 private:
  struct Plan {
    const Kernel* kernel = nullptr;
    const DeviceInfo* device = nullptr;
    Platform platform = Platform::kCpu;
    Invocation invocation;
    AutotunePolicy policy;
  };
  absl::StatusOr<Plan> MakePlan(std::string_view kernel, const TensorSpecMap& specs,
                                const Attributes& attrs, const ExecuteOptions& options) const;

  const KernelRegistry* const registry_;
  ConfigSelectorChain* const chain_;
  const std::vector<DeviceInfo> gpus_;
  const DeviceInfo cpu_;
  const ExecutorOptions options_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_EXECUTOR_H_
