#include "kernels/flash_attention/cpu/flash_attention_bwd_cpu.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/flash_attention/cpu/flash_attention_bwd.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

using cpu::FlashAttentionArgs;
using cpu::FlashAttentionBwdArgs;

std::vector<int64_t> IntsOrEmpty(const TensorMap& inputs, const std::string& name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? std::vector<int64_t>() : it->second.ToInts();
}

// Not thread-safe (see PreparedRun).
class FlashAttentionBwdCpuRun : public cpu::CpuRun {
 public:
  FlashAttentionBwdCpuRun(const FlashAttentionBwdProblem& p, const TensorMap& inputs)
      : cu_seqlens_q_(IntsOrEmpty(inputs, "cu_seqlens_q")),
        cu_seqlens_k_(IntsOrEmpty(inputs, "cu_seqlens_k")),
        q_segment_ids_(IntsOrEmpty(inputs, "q_segment_ids")),
        kv_segment_ids_(IntsOrEmpty(inputs, "kv_segment_ids")) {
    SetForwardArgs(p.fwd, inputs);
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
  // args_.fwd: the forward call's inputs and params, as the forward's CPU run sets them.
  void SetForwardArgs(const FlashAttentionProblem& p, const TensorMap& inputs) {
    FlashAttentionArgs& a = args_.fwd;
    a.dtype = p.dtype;
    a.q = inputs.at("q").data();
    a.k = inputs.at("k").data();
    a.v = inputs.at("v").data();
    a.total_q = p.total_q;
    a.total_k = p.total_k;
    a.num_heads_q = p.num_heads_q;
    a.num_heads_kv = p.num_heads_kv;
    a.head_dim = p.head_dim;
    a.num_sequences = p.num_sequences;
    a.seq_len_q = p.seq_len_q;
    a.seq_len_k = p.seq_len_k;
    if (p.varlen) {
      a.cu_seqlens_q = cu_seqlens_q_.data();
      a.cu_seqlens_k = cu_seqlens_k_.data();
    }
    a.softmax_scale = static_cast<float>(p.softmax_scale);
    a.causal = p.causal;
    a.window_left = p.window_left;
    a.window_right = p.window_right;
    a.softcap = static_cast<float>(p.logits_soft_cap);
    if (p.has_bias) {
      a.bias = inputs.at("bias").data_as<float>();
      // An empty bias (no batch or no head) is never read: its Sq * Sk need not fit int64.
      const int64_t plane = p.bias_batch == 0 || p.bias_heads == 0 ? 0 : p.seq_len_q * p.seq_len_k;
      a.bias_head_stride = p.bias_heads == 1 ? 0 : plane;
      a.bias_batch_stride = p.bias_batch == 1 ? 0 : p.bias_heads * plane;
    }
    if (p.has_segment_ids) {
      a.q_segment_ids = q_segment_ids_.data();
      a.kv_segment_ids = kv_segment_ids_.data();
    }
  }

  // Index inputs as int64; empty when not given. args_ points into them.
  const std::vector<int64_t> cu_seqlens_q_;
  const std::vector<int64_t> cu_seqlens_k_;
  const std::vector<int64_t> q_segment_ids_;
  const std::vector<int64_t> kv_segment_ids_;
  FlashAttentionBwdArgs args_;  // points into the inputs, the vectors above and the outputs
};

// Below this many multiply-adds (about a millisecond of one core) one thread beats several.
constexpr double kSingleThreadMacs = 4194304.0;  // 2^22
// Multiply-adds per (query, key, dim) of the three passes: q.k and dout.v in the dq pass and
// again in the dk/dv pass, then dq, dk and dv.
constexpr double kMacsPerElement = 7.0;

KernelConfig CpuConfig(int block_q, int block_k, int threads) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.num_warps = threads;
  config.platform = "cpu";
  return config;
}

class FlashAttentionBwdCpuImpl : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }

  absl::Status Supports(const Problem& /*problem*/, const DeviceInfo& /*device*/) const override {
    return absl::OkStatus();  // the reference runs every valid call
  }

  KernelConfig Heuristic(const Problem& problem, const DeviceInfo& device) const override {
    const auto& p = ProblemAs<FlashAttentionBwdProblem>(problem).fwd;
    // Mean sequence lengths (exact in the dense form).
    const int64_t n = std::max<int64_t>(p.num_sequences, 1);
    const double mean_q = static_cast<double>(p.total_q) / static_cast<double>(n);
    const double mean_k = static_cast<double>(p.total_k) / static_cast<double>(n);
    const double macs = kMacsPerElement * static_cast<double>(n) *
                        static_cast<double>(p.num_heads_q) * mean_q * mean_k *
                        static_cast<double>(p.head_dim);
    const int block_q = mean_q <= 16.0 ? 16 : 32;
    const int block_k = p.head_dim <= 64 ? 64 : 32;
    const int threads = macs < kSingleThreadMacs ? 1 : cpu::HardwareThreads(device);
    return CpuConfig(block_q, block_k, threads);
  }

  std::vector<KernelConfig> Candidates(const Problem& /*problem*/,
                                       const DeviceInfo& device) const override {
    const std::set<int> threads = {1, 2, cpu::HardwareThreads(device)};
    std::vector<KernelConfig> configs;
    for (int block_q : {16, 32, 64}) {
      for (int block_k : {32, 64, 128}) {
        for (int t : threads) configs.push_back(CpuConfig(block_q, block_k, t));
      }
    }
    return configs;
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
