#include "kernels/flash_attention/cpu/flash_attention_cpu.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace cpu {
namespace {

// Below this many multiply-adds (about a millisecond of one core) one thread beats several.
constexpr double kSingleThreadMacs = 4194304.0;  // 2^22

std::vector<int64_t> IntsOrEmpty(const TensorMap& inputs, const std::string& name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? std::vector<int64_t>() : it->second.ToInts();
}

KernelConfig CpuConfig(int block_q, int block_k, int threads) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  SetRequestedThreads(&config, threads);
  config.platform = "cpu";
  return config;
}

}  // namespace

FlashIndexInputs::FlashIndexInputs(const TensorMap& inputs)
    : cu_seqlens_q(IntsOrEmpty(inputs, "cu_seqlens_q")),
      cu_seqlens_k(IntsOrEmpty(inputs, "cu_seqlens_k")),
      q_segment_ids(IntsOrEmpty(inputs, "q_segment_ids")),
      kv_segment_ids(IntsOrEmpty(inputs, "kv_segment_ids")) {}

FlashAttentionArgs FlashArgsOf(const FlashAttentionProblem& p, const TensorMap& inputs,
                               const FlashIndexInputs& index) {
  FlashAttentionArgs args;
  args.dtype = p.dtype;
  args.q = inputs.at("q").data();
  args.k = inputs.at("k").data();
  args.v = inputs.at("v").data();
  args.total_q = p.total_q;
  args.total_k = p.total_k;
  args.num_heads_q = p.num_heads_q;
  args.num_heads_kv = p.num_heads_kv;
  args.head_dim = p.head_dim;
  args.num_sequences = p.num_sequences;
  args.seq_len_q = p.seq_len_q;
  args.seq_len_k = p.seq_len_k;
  if (p.varlen) {
    args.cu_seqlens_q = index.cu_seqlens_q.data();
    args.cu_seqlens_k = index.cu_seqlens_k.data();
  }
  args.softmax_scale = static_cast<float>(p.softmax_scale);
  args.causal = p.causal;
  args.window_left = p.window_left;
  args.window_right = p.window_right;
  args.softcap = static_cast<float>(p.logits_soft_cap);
  if (p.has_bias) {
    args.bias = inputs.at("bias").data_as<float>();
    // A bias without a batch or a head is empty and never read: its Sq * Sk need not fit
    // int64 (bias [0,1,2^40,2^40]). Otherwise the bias holds Sq * Sk elements per plane.
    const int64_t plane = p.bias_batch == 0 || p.bias_heads == 0 ? 0 : p.seq_len_q * p.seq_len_k;
    args.bias_head_stride = p.bias_heads == 1 ? 0 : plane;
    args.bias_batch_stride = p.bias_batch == 1 ? 0 : p.bias_heads * plane;
  }
  if (p.has_segment_ids) {
    args.q_segment_ids = index.q_segment_ids.data();
    args.kv_segment_ids = index.kv_segment_ids.data();
  }
  return args;
}

KernelConfig FlashCpuHeuristic(const FlashAttentionProblem& p, const DeviceInfo& device,
                               double macs_per_element) {
  // Mean sequence lengths (exact in the dense form).
  const int64_t n = std::max<int64_t>(p.num_sequences, 1);
  const double mean_q = static_cast<double>(p.total_q) / static_cast<double>(n);
  const double mean_k = static_cast<double>(p.total_k) / static_cast<double>(n);
  const double macs = macs_per_element * static_cast<double>(n) *
                      static_cast<double>(p.num_heads_q) * mean_q * mean_k *
                      static_cast<double>(p.head_dim);
  const int block_q = mean_q <= 16.0 ? 16 : 32;
  const int block_k = p.head_dim <= 64 ? 64 : 32;
  const int threads = macs < kSingleThreadMacs ? 1 : HardwareThreads(device);
  return CpuConfig(block_q, block_k, threads);
}

std::vector<KernelConfig> FlashCpuCandidates(const DeviceInfo& device) {
  const std::set<int> threads = {1, 2, HardwareThreads(device)};
  std::vector<KernelConfig> configs;
  for (int block_q : {16, 32, 64}) {
    for (int block_k : {32, 64, 128}) {
      for (int t : threads) configs.push_back(CpuConfig(block_q, block_k, t));
    }
  }
  return configs;
}

}  // namespace cpu

namespace {

// Multiply-adds per (query, key, dim): q.k and p.v.
constexpr double kMacsPerElement = 2.0;

// Points at q, k, v and bias in the inputs (which outlive it), copies the offsets and segment
// ids as int64 and allocates `out` (and `lse` when return_lse). Not thread-safe (see
// PreparedRun).
class FlashAttentionCpuRun : public cpu::CpuRun {
 public:
  FlashAttentionCpuRun(const FlashAttentionProblem& p, const TensorMap& inputs)
      : index_(inputs), args_(cpu::FlashArgsOf(p, inputs, index_)) {
    AddOutput("out", p.dtype, inputs.at("q").shape(), &args_.out);
    if (p.return_lse) {
      AddOutput("lse", DType::kF32, FlashLseShape(p), &args_.lse);
    }
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return cpu::FlashAttentionCpu(args_, config); });
  }

 private:
  const cpu::FlashIndexInputs index_;
  cpu::FlashAttentionArgs args_;  // points into the inputs, index_ and the outputs
};

// The flash attention reference as CpuImpl runs it.
struct FlashAttentionCpuTraits {
  using ProblemType = FlashAttentionProblem;
  using Run = FlashAttentionCpuRun;

  static KernelConfig Heuristic(const FlashAttentionProblem& p, const DeviceInfo& device) {
    return cpu::FlashCpuHeuristic(p, device, kMacsPerElement);
  }
  static std::vector<KernelConfig> Candidates(const FlashAttentionProblem& /*p*/,
                                              const DeviceInfo& device) {
    return cpu::FlashCpuCandidates(device);
  }
  static const ConfigSchema& ConfigFields() { return cpu::FlashAttentionCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return cpu::CheckFlashAttentionCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeFlashAttentionCpu() {
  return std::make_unique<cpu::CpuImpl<FlashAttentionCpuTraits>>();
}

}  // namespace kernelserve
