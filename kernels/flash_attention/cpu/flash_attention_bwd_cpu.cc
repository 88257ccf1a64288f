#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"

#include <memory>
#include <vector>

#include "kernels/flash_attention/cpu/flash_attention_bwd.h"
#include "kernels/flash_attention/cpu/flash_attention_cpu.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

// Multiply-adds per (query, key, dim) of the three passes: q.k and dout.v in the dq pass and
// again in the dk/dv pass, then dq, dk and dv.
constexpr double kMacsPerElement = 7.0;

// Points at q, k, v, out, lse, dout and bias in the inputs (which outlive it), copies the
// offsets and segment ids as int64 and allocates dq, dk, dv (and dbias when return_dbias).
// Not thread-safe (see PreparedRun).
class FlashAttentionBwdCpuRun : public cpu::CpuRun {
 public:
  FlashAttentionBwdCpuRun(const FlashAttentionBwdProblem& p, const TensorMap& inputs)
      : index_(inputs) {
    args_.fwd = cpu::FlashArgsOf(p.fwd, inputs, index_);
    args_.out = inputs.at("out").data();
    args_.lse = inputs.at("lse").data_as<float>();
    args_.dout = inputs.at("dout").data();
    AddOutput("dq", p.fwd.dtype, p.fwd.q_shape, &args_.dq);
    AddOutput("dk", p.fwd.dtype, p.k_shape, &args_.dk);
    AddOutput("dv", p.fwd.dtype, p.k_shape, &args_.dv);
    if (p.return_dbias) {
      AddOutput("dbias", DType::kF32, FlashBiasShape(p.fwd), &args_.dbias);
      args_.dbias_batch = p.fwd.bias_batch;
      args_.dbias_heads = p.fwd.bias_heads;
    }
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.fwd.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return cpu::FlashAttentionBwdCpu(args_, config); });
  }

 private:
  const cpu::FlashIndexInputs index_;
  cpu::FlashAttentionBwdArgs args_;  // points into the inputs, index_ and the outputs
};

// The flash attention backward reference as CpuImpl runs it.
struct FlashAttentionBwdCpuTraits {
  using ProblemType = FlashAttentionBwdProblem;
  using Run = FlashAttentionBwdCpuRun;

  static KernelConfig Heuristic(const FlashAttentionBwdProblem& p, const DeviceInfo& device) {
    return cpu::FlashCpuHeuristic(p.fwd, device, kMacsPerElement);
  }
  static std::vector<KernelConfig> Candidates(const FlashAttentionBwdProblem& /*p*/,
                                              const DeviceInfo& device) {
    return cpu::FlashCpuCandidates(device);
  }
  static const ConfigSchema& ConfigFields() { return cpu::FlashAttentionBwdCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return cpu::CheckFlashAttentionBwdCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCpu() {
  return std::make_unique<cpu::CpuImpl<FlashAttentionBwdCpuTraits>>();
}

}  // namespace kernelserve
