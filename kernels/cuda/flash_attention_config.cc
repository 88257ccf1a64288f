#include "kernels/cuda/flash_attention_config.h"

#include <algorithm>

namespace kernelserve::cuda {
namespace {

// Must match KS_FLASH_INSTANCES_D64 / _D128 in flash_attention_instances.h (the dispatch test
// checks every config listed here against the compiled instances).
struct CompiledShape {
  int head_dim;
  int block_q;
  int block_k;
  int num_warps;
  int num_stages;
};
constexpr CompiledShape kCompiled[] = {
    {64, 64, 64, 4, 2},   {64, 64, 128, 4, 2},  {64, 64, 128, 4, 3}, {64, 128, 64, 8, 2},
    {64, 128, 128, 8, 2}, {128, 64, 32, 4, 2},  {128, 64, 64, 4, 2}, {128, 64, 64, 4, 3},
    {128, 128, 32, 8, 2}, {128, 128, 64, 8, 2},
};
// Used when the device reports no shared-memory limit (an H100 SXM).
constexpr int64_t kDefaultSharedOptin = 227 * 1024;

KernelConfig MakeConfig(int block_q, int block_k, int num_warps, int num_stages) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.num_warps = num_warps;
  config.num_stages = num_stages;
  config.platform = "cuda";
  return config;
}

}  // namespace

bool IsFlashHeadDimCompiled(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

std::vector<KernelConfig> FlashAttentionCompiledConfigs(int64_t head_dim) {
  std::vector<KernelConfig> out;
  for (const CompiledShape& s : kCompiled) {
    if (s.head_dim == head_dim) {
      out.push_back(MakeConfig(s.block_q, s.block_k, s.num_warps, s.num_stages));
    }
  }
  return out;
}

bool IsFlashConfigCompiled(const KernelConfig& config, int64_t head_dim) {
  if (!(config.platform.empty() || config.platform == "cuda") || config.block_d != 0 ||
      config.block_size != 0 || !config.backend.empty() || !config.algorithm.empty()) {
    return false;
  }
  for (const CompiledShape& s : kCompiled) {
    if (s.head_dim == head_dim && s.block_q == config.block_q && s.block_k == config.block_k &&
        s.num_warps == config.num_warps && s.num_stages == config.num_stages) {
      return true;
    }
  }
  return false;
}

int64_t FlashConfigSharedBytes(const KernelConfig& config, int64_t head_dim) {
  return head_dim * 2 *
         (static_cast<int64_t>(config.block_q) +
          2 * static_cast<int64_t>(config.block_k) * config.num_stages);
}

bool FlashConfigFits(const KernelConfig& config, int64_t head_dim, const DeviceInfo& device) {
  const int64_t limit = device.shared_memory_per_block_optin > 0
                            ? device.shared_memory_per_block_optin
                            : kDefaultSharedOptin;
  return IsFlashConfigCompiled(config, head_dim) &&
         FlashConfigSharedBytes(config, head_dim) <= limit;
}

std::vector<KernelConfig> FlashAttentionCandidates(const FlashAttentionProblem& problem,
                                                   const DeviceInfo& device) {
  // No kernel for this head dim or dtype: nothing to tune (the call runs on the CPU).
  if (!IsFlashHeadDimCompiled(problem.head_dim) || problem.dtype == DType::kF32) return {};
  const KernelConfig best = FlashAttentionHeuristic(problem, device);
  std::vector<KernelConfig> out = {best};
  for (const KernelConfig& config : FlashAttentionCompiledConfigs(problem.head_dim)) {
    if (config == best || !FlashConfigFits(config, problem.head_dim, device)) continue;
    out.push_back(config);
  }
  return out;
}

KernelConfig FlashAttentionHeuristic(const FlashAttentionProblem& problem,
                                     const DeviceInfo& device) {
  // Measured on an H100 (docs/PERFORMANCE.md): 4 warps x 64 query rows (two blocks per SM)
  // beat 8 warps x 128 rows by 2-7% from 8x2048 to 2x8192 tokens, causal or not, D 64 and 128.
  const int block_k = problem.head_dim <= 64 ? 128 : 64;
  const KernelConfig preferred = MakeConfig(64, block_k, 4, 2);
  if (FlashConfigFits(preferred, problem.head_dim, device)) return preferred;
  // A device with less shared memory: the largest compiled config that fits.
  KernelConfig chosen = preferred;
  int64_t chosen_bytes = -1;
  for (const KernelConfig& config : FlashAttentionCompiledConfigs(problem.head_dim)) {
    const int64_t bytes = FlashConfigSharedBytes(config, problem.head_dim);
    if (FlashConfigFits(config, problem.head_dim, device) && bytes > chosen_bytes) {
      chosen = config;
      chosen_bytes = bytes;
    }
  }
  return chosen;
}

}  // namespace kernelserve::cuda
