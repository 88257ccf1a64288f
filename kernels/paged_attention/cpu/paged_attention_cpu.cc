#include "kernels/paged_attention/cpu/paged_attention_cpu.h"

#include <algorithm>
#include <set>
#include <vector>

#include "kernels/paged_attention/cpu/paged_attention.h"
#include "kernels/paged_attention/paged_attention_kernel.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"

namespace kernelserve {
namespace {

// Below this many multiply-adds (about a millisecond of one core) one thread beats several.
constexpr double kSingleThreadMacs = 4194304.0;  // 2^22

KernelConfig CpuConfig(int threads) {
  KernelConfig config;
  cpu::SetRequestedThreads(&config, threads);
  config.platform = "cpu";
  return config;
}

// The caches are the schema's updated inputs: the kernel writes through their data, which the
// server made this call's own (inline data) or holds for writing (a resident tensor).
void* Updated(const Tensor& tensor) { return const_cast<void*>(tensor.data()); }

// A scale input's values (copied: an input's bytes need not be aligned for float), or none.
std::vector<float> ScalesOf(const TensorMap& inputs, const char* name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? std::vector<float>() : it->second.ToFloats();
}

// Points the args at the inputs (which outlive it), copies the index data as int64 and the
// scales, and allocates the outputs. Not thread-safe (see PreparedRun).
class PagedAttentionCpuRun : public cpu::CpuRun {
 public:
  PagedAttentionCpuRun(const PagedAttentionProblem& p, const TensorMap& inputs)
      : table_(inputs.at("block_table").ToInts()),
        lens_(inputs.at("cache_seqlens").ToInts()),
        k_scale_(ScalesOf(inputs, "k_scale")),
        v_scale_(ScalesOf(inputs, "v_scale")) {
    args_.dtype = p.dtype;
    args_.cache_dtype = p.cache_dtype;
    args_.q = inputs.at("q").data();
    args_.k_cache = Updated(inputs.at("k_cache"));
    args_.v_cache = Updated(inputs.at("v_cache"));
    args_.block_table = table_.data();
    args_.cache_seqlens = lens_.data();
    if (p.append) {
      args_.k = inputs.at("k").data();
      args_.v = inputs.at("v").data();
    }
    if (p.has_k_scale) args_.k_scale = k_scale_.data();
    if (p.has_v_scale) args_.v_scale = v_scale_.data();
    args_.batch = p.batch;
    args_.seq_len_q = p.seq_len_q;
    args_.num_heads_q = p.num_heads_q;
    args_.num_heads_kv = p.num_heads_kv;
    args_.head_dim = p.head_dim;
    args_.page_size = p.page_size;
    args_.max_pages = p.max_pages;
    args_.softmax_scale = p.softmax_scale;
    args_.causal = p.causal;
    args_.window_left = p.window_left;
    args_.window_right = p.window_right;
    args_.softcap = p.logits_soft_cap;
    AddOutput("out", p.dtype, {p.batch, p.seq_len_q, p.num_heads_q, p.head_dim}, &args_.out);
    if (p.return_lse) {
      AddOutput("lse", DType::kF32, {p.batch, p.num_heads_q, p.seq_len_q}, &args_.lse);
    }
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] {
      // Appending the same tokens again writes the same bytes: launches repeat safely.
      cpu::PagedAppendCpu(args_);
      return cpu::PagedAttentionCpu(args_, config);
    });
  }

 private:
  const std::vector<int64_t> table_;
  const std::vector<int64_t> lens_;
  const std::vector<float> k_scale_;  // empty when not given
  const std::vector<float> v_scale_;
  cpu::PagedAttentionArgs args_;  // points into the inputs, table_, lens_, the scales, the outputs
};

// Multiply-adds of a call: two per key element read per query row (q.k and p.v), every key of
// the cache's capacity counted (the lengths are data; the config is chosen from shapes).
double Macs(const PagedAttentionProblem& p) {
  return 2.0 * static_cast<double>(p.batch * p.seq_len_q * p.num_heads_q) *
         static_cast<double>(p.max_pages * p.page_size) * static_cast<double>(p.head_dim);
}

struct PagedAttentionCpuTraits {
  using ProblemType = PagedAttentionProblem;
  using Run = PagedAttentionCpuRun;

  static KernelConfig Heuristic(const PagedAttentionProblem& p, const DeviceInfo& device) {
    // Threads pay off once the work hides their start-up.
    return CpuConfig(Macs(p) < kSingleThreadMacs ? 1 : cpu::HardwareThreads(device));
  }
  static std::vector<KernelConfig> Candidates(const PagedAttentionProblem& /*p*/,
                                              const DeviceInfo& device) {
    std::vector<KernelConfig> configs;
    for (int threads : std::set<int>{1, 2, cpu::HardwareThreads(device)}) {
      configs.push_back(CpuConfig(threads));
    }
    return configs;
  }
  static const ConfigSchema& ConfigFields() { return cpu::PagedAttentionCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return cpu::CheckPagedAttentionCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakePagedAttentionCpu() {
  return std::make_unique<cpu::CpuImpl<PagedAttentionCpuTraits>>();
}

}  // namespace kernelserve
