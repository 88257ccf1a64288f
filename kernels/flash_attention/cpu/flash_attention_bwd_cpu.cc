#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"

#include <memory>
#include <vector>

#include "kernels/flash_attention/cpu/flash_attention_bwd.h"
#include "kernels/flash_attention/cpu/flash_attention_cpu.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

// Multiply-adds per (query, key, dim) of the three passes: q.k and dout.v in the dq pass and
// again in the dk/dv pass, then dq, dk and dv.
constexpr double kMacsPerElement = 7.0;

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
      AddOutput("dbias", DType::kF32,
                {p.fwd.bias_batch, p.fwd.bias_heads, p.fwd.seq_len_q, p.fwd.seq_len_k},
                &args_.dbias);
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

class FlashAttentionBwdCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }

  absl::Status Supports(const Problem& /*problem*/, const DeviceInfo& /*device*/) const override {
    return absl::OkStatus();  // the reference runs every valid call
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    return cpu::FlashCpuHeuristic(ProblemAs<FlashAttentionBwdProblem>(problem).fwd, device,
                                  kMacsPerElement);
  }

  std::vector<KernelConfig> Candidates(const Problem& /*problem*/,
                                       const DeviceInfo& device) const override {
    return cpu::FlashCpuCandidates(device);
  }

  absl::Status CheckConfig(const KernelConfig& config, const Problem& /*problem*/,
                           const DeviceInfo& /*device*/) const override {
    return cpu::CheckFlashAttentionBwdCpuConfig(config);
  }

  // Keeps pointers to q, k, v, out, lse, dout and bias in `inputs` (which must outlive the
  // run), copies the offsets and segment ids as int64 and allocates dq, dk, dv (and dbias
  // when return_dbias).
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(
      const Problem& problem, const TensorMap& inputs,
      const DeviceInfo& /*device*/) const override {
    return std::unique_ptr<PreparedRun>(std::make_unique<FlashAttentionBwdCpuRun>(
        ProblemAs<FlashAttentionBwdProblem>(problem), inputs));
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCpu() {
  return std::make_unique<FlashAttentionBwdCpuImpl>();
}

}  // namespace kernelserve
