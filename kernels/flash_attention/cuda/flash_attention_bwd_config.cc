#include "kernels/flash_attention/cuda/flash_attention_bwd_config.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "kernels/flash_attention/cuda/flash_attention_bwd_instances.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"

namespace kernelserve::cuda {
namespace {

enum Algorithm { kMma, kWgmma };

struct CompiledShape {
  Algorithm algorithm;
  DType dtype;
  int head_dim;
  int block_q;
  int block_k;
};
// The instances the .cu files compile (flash_attention_bwd_instances.h names them once).
#define KS_FLASH_BWD_SHAPE(ALGO, DT, CT, D, BQ, BK) {k##ALGO, DType::DT, D, BQ, BK},
constexpr CompiledShape kCompiled[] = {KS_FOR_EACH_FLASH_BWD_INSTANCE(KS_FLASH_BWD_SHAPE)};
#undef KS_FLASH_BWD_SHAPE
// Used when the device reports no shared-memory limit (an H100 SXM).
constexpr int64_t kDefaultSharedOptin = 227 * 1024;

KernelConfig MakeConfig(Algorithm algorithm, int block_q, int block_k) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.platform = "cuda";
  if (algorithm == kWgmma) config.algorithm = std::string(kFlashWgmmaAlgorithm);
  return config;
}

ConfigFieldSchema CompiledField(const char* name, int CompiledShape::*field, std::string doc) {
  auto [lo, hi] = std::minmax_element(
      std::begin(kCompiled), std::end(kCompiled),
      [&](const CompiledShape& a, const CompiledShape& b) { return a.*field < b.*field; });
  return IntConfigField(name, (*lo).*field, (*hi).*field, "none: always set", std::move(doc));
}

}  // namespace

const ConfigSchema& FlashAttentionBwdCudaConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      CompiledField("block_q", &CompiledShape::block_q, "query rows per block"),
      CompiledField("block_k", &CompiledShape::block_k, "key rows per block"),
      ChoiceConfigField("algorithm", {std::string(kFlashWgmmaAlgorithm)}, "the mma.sync kernels",
                        "the kernel variant (wgmma: Hopper, compute capability 9.0)"),
  }};
  return *kSchema;
}

bool IsFlashBwdHeadDimCompiled(int64_t head_dim) {
  return std::any_of(std::begin(kCompiled), std::end(kCompiled),
                     [&](const CompiledShape& s) { return s.head_dim == head_dim; });
}

std::vector<KernelConfig> FlashAttentionBwdCompiledConfigs(int64_t head_dim) {
  std::vector<KernelConfig> out;
  for (const CompiledShape& s : kCompiled) {
    // Both dtypes compile the same shapes: list each once.
    if (s.head_dim == head_dim && s.dtype == DType::kBF16) {
      out.push_back(MakeConfig(s.algorithm, s.block_q, s.block_k));
    }
  }
  return out;
}

bool IsFlashBwdConfigCompiled(const KernelConfig& config, int64_t head_dim) {
  KernelConfig bare = config;
  if (bare.platform.empty()) bare.platform = "cuda";
  const std::vector<KernelConfig> compiled = FlashAttentionBwdCompiledConfigs(head_dim);
  return std::find(compiled.begin(), compiled.end(), bare) != compiled.end();
}

int64_t FlashBwdConfigSharedBytes(const KernelConfig& config, int64_t head_dim) {
  const int d = static_cast<int>(head_dim);
  if (config.algorithm == kFlashWgmmaAlgorithm) {
    return static_cast<int64_t>(FlashBwdWgmmaSharedBytes(d, config.block_q, config.block_k));
  }
  return static_cast<int64_t>(std::max(FlashBwdDkvSharedBytes(d, config.block_q, config.block_k),
                                       FlashBwdDqSharedBytes(d, config.block_q, config.block_k)));
}

bool FlashBwdConfigFits(const KernelConfig& config, int64_t head_dim, const DeviceInfo& device) {
  const int64_t limit = device.shared_memory_per_block_optin > 0
                            ? device.shared_memory_per_block_optin
                            : kDefaultSharedOptin;
  return IsFlashBwdConfigCompiled(config, head_dim) &&
         (config.algorithm != kFlashWgmmaAlgorithm || IsFlashWgmmaDevice(device)) &&
         FlashBwdConfigSharedBytes(config, head_dim) <= limit;
}

std::vector<KernelConfig> FlashAttentionBwdCandidates(const FlashAttentionBwdProblem& problem,
                                                      const DeviceInfo& device) {
  const int64_t d = problem.fwd.head_dim;
  if (!IsFlashBwdHeadDimCompiled(d) || problem.fwd.dtype == DType::kF32) return {};
  const KernelConfig best = FlashAttentionBwdHeuristic(problem, device);
  std::vector<KernelConfig> out = {best};
  for (const KernelConfig& config : FlashAttentionBwdCompiledConfigs(d)) {
    if (config != best && FlashBwdConfigFits(config, d, device)) out.push_back(config);
  }
  return out;
}

KernelConfig FlashAttentionBwdHeuristic(const FlashAttentionBwdProblem& problem,
                                        const DeviceInfo& device) {
  // Hopper: the one-kernel wgmma backward (5 matrix products a tile where the mma.sync kernels
  // run 7, on the warpgroup MMAs). Elsewhere: key tiles of 128 give the dK/dV kernel 8 warps
  // that share each streamed query tile; at D = 128 that kernel then needs 129 KiB and the dQ
  // kernel 160 KiB, one block an SM, so key tiles of 64 (99 and 96 KiB: two blocks an SM) are
  // taken there.
  const int64_t d = problem.fwd.head_dim;
  const KernelConfig hopper = MakeConfig(kWgmma, 64, 128);
  if (FlashBwdConfigFits(hopper, d, device)) return hopper;
  const KernelConfig preferred = MakeConfig(kMma, 64, d <= 64 ? 128 : 64);
  if (FlashBwdConfigFits(preferred, d, device)) return preferred;
  KernelConfig chosen = preferred;
  int64_t chosen_bytes = -1;
  for (const KernelConfig& config : FlashAttentionBwdCompiledConfigs(d)) {
    const int64_t bytes = FlashBwdConfigSharedBytes(config, d);
    if (FlashBwdConfigFits(config, d, device) && (chosen_bytes < 0 || bytes < chosen_bytes)) {
      chosen = config;
      chosen_bytes = bytes;
    }
  }
  return chosen;
}

}  // namespace kernelserve::cuda
