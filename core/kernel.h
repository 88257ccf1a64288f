// Kernel: one operation (mean pooling, flash attention) with its validation, heuristic,
// autotune space and one implementation per platform.
#ifndef KERNELSERVE_CORE_KERNEL_H_
#define KERNELSERVE_CORE_KERNEL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/device.h"
#include "core/kernel_config.h"
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
  // Seconds spent moving inputs to the device in Prepare (0 on the CPU).
  virtual double upload_seconds() const { return 0.0; }

  // Launches check `interrupt` as they go where the platform can stop part way (the CPU
  // kernels, between work items) and then fail with its status. Empty = never.
  void set_interrupt(std::function<absl::Status()> interrupt) { interrupt_ = std::move(interrupt); }

 protected:
  const std::function<absl::Status()>& interrupt() const { return interrupt_; }

 private:
  std::function<absl::Status()> interrupt_;
};

// One platform's implementation of a kernel.
// Thread safety: Prepare may be called from many threads at once.
class PlatformImpl {
 public:
  virtual ~PlatformImpl() = default;
  virtual Platform platform() const = 0;
  // Makes `inputs` (already validated by the kernel) ready to launch on `device`.
  // `inputs` must outlive the returned run. Out of device memory -> ResourceExhausted.
  virtual absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                               const Attributes& attrs,
                                                               const DeviceInfo& device) = 0;
  // OK when `config` can run on `device` for these inputs: every field within the platform's
  // limits, compiled, fits shared memory. InvalidArgument naming the field and its allowed
  // range (or what else rules the config out) otherwise. Nothing is sized from a config that
  // fails this check.
  virtual absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap& inputs,
                                   const DeviceInfo& device) const = 0;
  // CheckConfig(...).ok().
  bool Supports(const KernelConfig& config, const TensorSpecMap& inputs,
                const DeviceInfo& device) const {
    return CheckConfig(config, inputs, device).ok();
  }
};

// Describes one input or parameter for listings (ListKernels, --help).
struct ArgDoc {
  std::string name;
  bool required = true;
  std::string doc;  // "f32|f16|bf16 [B,S,H]"
};

// A kernel. Subclasses fill in the pure virtuals and register platform implementations.
// Thread safety: all const methods are safe to call from many threads.
class Kernel {
 public:
  virtual ~Kernel() = default;

  virtual std::string name() const = 0;  // "mean_pooling"
  virtual int version() const = 0;       // 1
  std::string id() const;                // "mean_pooling@v1"

  virtual std::vector<ArgDoc> input_docs() const = 0;
  virtual std::vector<ArgDoc> output_docs() const = 0;
  virtual std::vector<ArgDoc> attribute_docs() const = 0;

  // Checks names, dtypes, ranks and dims of the inputs and the attributes. InvalidArgument
  // naming the input and what was expected.
  virtual absl::Status Validate(const TensorSpecMap& inputs, const Attributes& attrs) const = 0;
  // Checks the values of index inputs (cu_seqlens...), which Validate cannot see.
  // REQUIRES: Validate(SpecsOf(inputs), attrs).ok().
  virtual absl::Status ValidateData(const TensorMap& /*inputs*/,
                                    const Attributes& /*attrs*/) const {
    return absl::OkStatus();
  }
  // Output specs for these inputs. REQUIRES: Validate(...).ok().
  virtual TensorSpecMap OutputSpecs(const TensorSpecMap& inputs, const Attributes& attrs) const = 0;

  // Inputs of the given specs with valid random data (index inputs such as cu_seqlens get
  // valid values), for tuning from shapes alone. The default fills floats uniformly in
  // [-1, 1] and integers and bools with 1. Defined in core/synthesize.cc.
  virtual absl::StatusOr<TensorMap> SynthesizeInputs(const TensorSpecMap& specs,
                                                     const Attributes& attrs, uint64_t seed) const;

  // A pure function of shapes, attributes and device. The config it returns is in
  // CandidateConfigs for the same arguments (tests check this).
  virtual KernelConfig HeuristicConfig(const TensorSpecMap& inputs, const Attributes& attrs,
                                       const DeviceInfo& device) const = 0;
  // The autotune space, filtered to configs the platform supports on `device`.
  virtual std::vector<KernelConfig> CandidateConfigs(const TensorSpecMap& inputs,
                                                     const Attributes& attrs,
                                                     const DeviceInfo& device) const = 0;
  // True when `config` is one of CandidateConfigs(...) (a stored config outside the space is
  // treated as a miss).
  bool IsCandidate(const KernelConfig& config, const TensorSpecMap& inputs, const Attributes& attrs,
                   const DeviceInfo& device) const;

  // Registers an implementation; replaces an earlier one of the same platform.
  void AddImpl(std::unique_ptr<PlatformImpl> impl);
  // nullptr when there is none.
  PlatformImpl* impl(Platform platform) const;
  std::vector<Platform> platforms() const;

  // "auto"/"" -> cuda when a GPU is present and a cuda impl exists, else cpu (the detection
  // order). An explicit platform without an implementation -> Unimplemented naming the ones
  // available; an unknown name -> InvalidArgument.
  absl::StatusOr<Platform> ResolvePlatform(std::string_view requested, bool gpu_present) const;

 private:
  std::map<Platform, std::unique_ptr<PlatformImpl>> impls_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_KERNEL_H_
