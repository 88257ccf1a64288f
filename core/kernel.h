// Kernel: one operation (mean pooling, flash attention): its schema, the analysis of a call,
// and one implementation per platform, which owns that platform's configs.
#ifndef KERNELSERVE_CORE_KERNEL_H_
#define KERNELSERVE_CORE_KERNEL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/kernel_config.h"
#include "core/schema.h"
#include "core/tensor.h"

namespace kernelserve {

// A call made ready on one device: inputs resident there, outputs allocated. Launch may be
// called many times (the tuner does), each time overwriting the outputs.
// Thread safety: not thread-safe; one thread drives a PreparedRun.
class PreparedRun {
 public:
  virtual ~PreparedRun() = default;
  // Runs the kernel once with `config` and waits for it. Returns the kernel's time in seconds,
  // measured with the platform's timer (steady clock on the CPU, events on a GPU).
  virtual absl::StatusOr<double> Launch(const KernelConfig& config) = 0;
  // Copies the outputs of the last Launch to host tensors. REQUIRES: a successful Launch.
  virtual absl::StatusOr<TensorMap> Fetch() = 0;
  // Has the next Launch write the outputs named in `places` (views of a client's shared
  // memory, see FetchInto) straight there where the platform can (a GPU's own memory); the
  // others FetchInto copies. The default: nothing (every place is copied).
  virtual absl::Status BindOutputs(const TensorMap& /*places*/) { return absl::OkStatus(); }
  // Fetch, except that the outputs named in `places` (views of a client's shared memory, on a
  // GPU or on the host, each of the output's size) are copied straight there and answered as
  // those tensors. The default, for platforms without device memory: Fetch when `places` is
  // empty, else Unimplemented.
  virtual absl::StatusOr<TensorMap> FetchInto(const TensorMap& places);
  // The run's last fetch: FetchInto(places), except that a platform whose outputs are host
  // tensors already may move them out rather than copy them (an output as large as the
  // in-flight budget allows is then held once, not twice). Nothing is launched or fetched
  // after it. The default: FetchInto(places).
  virtual absl::StatusOr<TensorMap> TakeOutputs(const TensorMap& places) {
    return FetchInto(places);
  }
  // Seconds spent moving inputs to the device in Prepare (0 on the CPU).
  virtual double upload_seconds() const { return 0.0; }
  // Seconds the host spent queuing the last Launch's kernel, which the time Launch returns
  // leaves out (a GPU's launch gate, cuda::LaunchGated); 0 where that time covers it (the CPU,
  // a GPU launch without the gate).
  virtual double launch_seconds() const { return 0.0; }

  // Launches check `interrupt` as they go where the platform can stop part way (the CPU
  // kernels, between work items) and then fail with its status. Empty = never.
  void set_interrupt(std::function<absl::Status()> interrupt) { interrupt_ = std::move(interrupt); }

 protected:
  const std::function<absl::Status()>& interrupt() const { return interrupt_; }
  // For Fetch and TakeOutputs of runs whose outputs are host tensors: `output` copied, or
  // moved out when `take`. (A map built from a braced list would copy each output twice.)
  static Tensor CopyOrTake(Tensor& output, bool take) {
    if (take) return std::move(output);
    return output;
  }

 private:
  std::function<absl::Status()> interrupt_;
};

// What a kernel's analysis of one call found: the problem its platforms solve (shapes, forms,
// resolved params). Each kernel derives its own (MeanPoolingProblem, FlashAttentionProblem)
// and its platforms read it back with ProblemAs. Made once per call; immutable after.
class Problem {
 public:
  virtual ~Problem() = default;
};

// `problem` as the kernel's own type. REQUIRES: `problem` was made by the kernel whose
// problems are P (a platform only ever gets its own kernel's).
template <typename P>
const P& ProblemAs(const Problem& problem) {
  return static_cast<const P&>(problem);
}

// One platform's implementation of a kernel: what it can run, its configs (heuristic, autotune
// space, limits) and the runs themselves. Every method takes the kernel's analysed problem.
// Thread safety: stateless; every method may run on many threads at once.
class PlatformImpl {
 public:
  virtual ~PlatformImpl() = default;
  virtual Platform platform() const = 0;

  // The platform's config fields (core/config_schema.h): what CheckConfig checks first and
  // what ListKernels, the CLI and the clients show. Lives as long as the implementation.
  virtual const ConfigSchema& config_schema() const = 0;

  // OK when this platform can run `problem` on `device` at all; Unimplemented naming what it
  // lacks (a dtype, a head dim) otherwise. "auto" routing passes over a platform that refuses.
  virtual absl::Status Supports(const Problem& problem, const DeviceInfo& device) const = 0;
  // A pure function of problem and device: one of Candidates(problem, device) (tests check
  // this). REQUIRES: Supports(problem, device).ok().
  virtual KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const = 0;
  // The autotune space on `device`, every config of it passing CheckConfig.
  // REQUIRES: Supports(problem, device).ok().
  virtual std::vector<KernelConfig> Candidates(const Problem& problem,
                                               const DeviceInfo& device) const = 0;
  // OK when `config` can run `problem` on `device`: every field within the platform's limits,
  // compiled, fits shared memory. InvalidArgument naming the field and its allowed range (or
  // what else rules the config out) otherwise. Nothing is sized from a config that fails it.
  virtual absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                                   const DeviceInfo& device) const = 0;
  // Makes `inputs` (checked by the kernel) ready to launch on `device`. `problem` and `inputs`
  // must outlive the returned run. Out of device memory -> ResourceExhausted.
  virtual absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                               const TensorMap& inputs,
                                                               const DeviceInfo& device) const = 0;

  // True when configs naming `config_platform` (KernelConfig::platform) are this platform's to
  // check and run: "" and its own name; an implementation that runs several platforms' configs
  // (a kernel's GPU "auto", Kernel::SetGpuAutoImpl) overrides it.
  virtual bool RunsConfigsOf(std::string_view config_platform) const;

  // True when `config` is one of Candidates(problem, device) (a stored config outside the
  // space is treated as a miss).
  bool IsCandidate(const KernelConfig& config, const Problem& problem,
                   const DeviceInfo& device) const;
};

// A kernel: its schema, the analysis of a call into its problem, and one implementation per
// platform. Subclasses declare the schema and analyse; platform implementations are added.
// Thread safety: all const methods are safe to call from many threads.
class Kernel {
 public:
  virtual ~Kernel() = default;

  // The kernel's declaration (core/schema.h); lives as long as the kernel.
  virtual const KernelSchema& schema() const = 0;
  const std::string& name() const { return schema().name; }  // "mean_pooling"
  int version() const { return schema().version; }           // 1
  std::string id() const;                                    // "mean_pooling@v1"

  // The one analysis of a call: checks the inputs against the schema (KernelSchema::CheckInputs)
  // and the kernel's own rules, and describes the problem. InvalidArgument naming the input or
  // param and what was expected. REQUIRES: `attrs` canonical (KernelSchema::CanonicalParams).
  absl::StatusOr<std::shared_ptr<const Problem>> Analyze(const TensorSpecMap& inputs,
                                                         const Attributes& attrs) const;
  // Checks the values of index inputs (cu_seqlens...), which the analysis cannot see.
  // REQUIRES: `problem` is the analysis of SpecsOf(inputs).
  virtual absl::Status ValidateData(const Problem& /*problem*/, const TensorMap& /*inputs*/) const {
    return absl::OkStatus();
  }
  // The outputs' specs.
  virtual TensorSpecMap OutputSpecs(const Problem& problem) const = 0;
  // Inputs of `specs` (the problem's) with valid random data, for tuning from shapes alone.
  // The default fills floats uniformly in [-1, 1] and integers and bools with 1; kernels with
  // index inputs override it. Defined in core/synthesize.cc.
  virtual absl::StatusOr<TensorMap> SynthesizeInputs(const Problem& problem,
                                                     const TensorSpecMap& specs,
                                                     uint64_t seed) const;

  // Registers an implementation; replaces an earlier one of the same platform.
  void AddImpl(std::unique_ptr<PlatformImpl> impl);
  // nullptr when there is none.
  const PlatformImpl* impl(Platform platform) const;
  std::vector<Platform> platforms() const;
  // The implementation that "auto" runs on a GPU where the kernel has several GPU platforms
  // (flash attention: its own kernels and cuDNN's plans): its heuristic and candidates span
  // theirs, and each config it gives names the platform that runs it. Without one (the
  // default), "auto" on a GPU is the cuda platform.
  void SetGpuAutoImpl(std::unique_ptr<PlatformImpl> impl);
  // nullptr when there is none.
  const PlatformImpl* gpu_auto_impl() const { return gpu_auto_.get(); }
  // What "auto" runs on a GPU: gpu_auto_impl() where set, else the cuda platform's (nullptr when
  // there is neither).
  const PlatformImpl* GpuAuto() const {
    return gpu_auto_ != nullptr ? gpu_auto_.get() : impl(Platform::kCuda);
  }

  // "auto"/"" -> cuda when a GPU is present and a cuda impl exists, else cpu (the detection
  // order); the executor then runs gpu_auto_impl() where there is one. An explicit platform without
  // an implementation -> Unimplemented naming the ones available; an unknown name ->
  // InvalidArgument.
  absl::StatusOr<Platform> ResolvePlatform(std::string_view requested, bool gpu_present) const;

 protected:
  // The kernel's own rules, after the schema's checks passed.
  virtual absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const = 0;

 private:
  std::map<Platform, std::unique_ptr<PlatformImpl>> impls_;
  std::unique_ptr<PlatformImpl> gpu_auto_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_KERNEL_H_
