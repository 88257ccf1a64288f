#include "kernels/flash_attention/cuda/flash_attention_config.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "kernels/flash_attention/cuda/flash_attention_instances.h"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {
namespace {

struct CompiledShape {
  FlashAlgorithm algorithm;
  DType dtype;
  int head_dim;
  int block_q;
  int block_k;
  int num_warps;
  int num_stages;
};
// The instances the .cu files compile (flash_attention_instances.h names them once).
#define KS_FLASH_SHAPE(ALGO, DT, CT, D, BQ, BK, WARPS, STAGES) \
  {FlashAlgorithm::k##ALGO, DType::DT, D, BQ, BK, WARPS, STAGES},
constexpr CompiledShape kCompiled[] = {KS_FOR_EACH_FLASH_INSTANCE(KS_FLASH_SHAPE)};
#undef KS_FLASH_SHAPE
// Used when the device reports no shared-memory limit (an H100 SXM).
constexpr int64_t kDefaultSharedOptin = 227 * 1024;

KernelConfig MakeConfig(FlashAlgorithm algorithm, int block_q, int block_k, int num_warps,
                        int num_stages) {
  KernelConfig config;
  config.block_q = block_q;
  config.block_k = block_k;
  config.num_warps = num_warps;
  config.num_stages = num_stages;
  config.platform = "cuda";
  config.algorithm = std::string(FlashAlgorithmName(algorithm));
  return config;
}

KernelConfig ConfigOf(const CompiledShape& s) {
  return MakeConfig(s.algorithm, s.block_q, s.block_k, s.num_warps, s.num_stages);
}

// The least and the most of `field` over the compiled instances.
template <typename Field>
std::pair<int, int> CompiledRange(Field field) {
  auto [lo, hi] = std::minmax_element(
      std::begin(kCompiled), std::end(kCompiled),
      [&](const CompiledShape& a, const CompiledShape& b) { return a.*field < b.*field; });
  return {(*lo).*field, (*hi).*field};
}

ConfigFieldSchema CompiledField(const char* name, int CompiledShape::*field, std::string doc) {
  auto [lo, hi] = CompiledRange(field);
  return IntConfigField(name, lo, hi, "none: always set", std::move(doc));
}

}  // namespace

std::string_view FlashAlgorithmName(FlashAlgorithm algorithm) {
  switch (algorithm) {
    case FlashAlgorithm::kWgmma:
      return kFlashWgmmaAlgorithm;
    case FlashAlgorithm::kWs:
      return kFlashWsAlgorithm;
    case FlashAlgorithm::kWsPp:
      return kFlashWsPingPongAlgorithm;
    case FlashAlgorithm::kMma:
      break;
  }
  return "";
}

bool FlashAlgorithmNamed(std::string_view name, FlashAlgorithm* algorithm) {
  constexpr FlashAlgorithm kAll[] = {FlashAlgorithm::kMma, FlashAlgorithm::kWgmma,
                                     FlashAlgorithm::kWs, FlashAlgorithm::kWsPp};
  const FlashAlgorithm* found =
      std::find_if(std::begin(kAll), std::end(kAll),
                   [&](FlashAlgorithm a) { return FlashAlgorithmName(a) == name; });
  if (found == std::end(kAll)) return false;
  *algorithm = *found;
  return true;
}

const ConfigSchema& FlashAttentionCudaConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      CompiledField("block_q", &CompiledShape::block_q, "query rows per block"),
      CompiledField("block_k", &CompiledShape::block_k, "key rows per K/V tile"),
      CompiledField("num_warps", &CompiledShape::num_warps, "warps per block"),
      CompiledField("num_stages", &CompiledShape::num_stages, "K/V tiles in flight"),
      ChoiceConfigField("algorithm",
                        {std::string(kFlashWgmmaAlgorithm), std::string(kFlashWsAlgorithm),
                         std::string(kFlashWsPingPongAlgorithm)},
                        "the mma.sync kernel",
                        "the kernel variant (wgmma, wgmma_ws, wgmma_pp: Hopper, compute "
                        "capability 9.0)"),
  }};
  return *kSchema;
}

bool IsFlashWgmmaDevice(const DeviceInfo& device) {
  return device.fingerprint.cc_major == 9 && device.fingerprint.cc_minor == 0;
}

bool IsFlashHeadDimCompiled(int64_t head_dim) {
  return std::any_of(std::begin(kCompiled), std::end(kCompiled),
                     [&](const CompiledShape& s) { return s.head_dim == head_dim; });
}

std::vector<KernelConfig> FlashAttentionCompiledConfigs(int64_t head_dim) {
  std::vector<KernelConfig> out;
  for (const CompiledShape& s : kCompiled) {
    // Both dtypes compile the same shapes: list each once.
    if (s.head_dim == head_dim && s.dtype == DType::kBF16) out.push_back(ConfigOf(s));
  }
  return out;
}

bool IsFlashConfigCompiled(const KernelConfig& config, int64_t head_dim) {
  FlashAlgorithm algorithm = FlashAlgorithm::kMma;
  if (!(config.platform.empty() || config.platform == "cuda") || config.block_d != 0 ||
      config.block_size != 0 || !config.named.empty() ||
      !FlashAlgorithmNamed(config.algorithm, &algorithm)) {
    return false;
  }
  return std::any_of(std::begin(kCompiled), std::end(kCompiled), [&](const CompiledShape& s) {
    return s.algorithm == algorithm && s.head_dim == head_dim && s.block_q == config.block_q &&
           s.block_k == config.block_k && s.num_warps == config.num_warps &&
           s.num_stages == config.num_stages;
  });
}

int64_t FlashConfigSharedBytes(const KernelConfig& config, int64_t head_dim) {
  // The Hopper kernels lay rows out in whole 64-element blocks (D = 96 takes 128) and align
  // their tiles to 1024 bytes, asking for that much slack (WgmmaSharedBytes); the
  // warp-specialized one adds its mbarriers.
  const int d = static_cast<int>(head_dim);
  if (config.algorithm == kFlashWsAlgorithm || config.algorithm == kFlashWsPingPongAlgorithm) {
    return static_cast<int64_t>(
        FlashWsSharedBytes(d, config.block_q, config.block_k, config.num_stages));
  }
  const bool wgmma = config.algorithm == kFlashWgmmaAlgorithm;
  return static_cast<int64_t>(FlashSharedBytes(wgmma ? FlashWgmmaWidth(d) : d, config.block_q,
                                               config.block_k, config.num_stages)) +
         (wgmma ? 1024 : 0);
}

bool FlashConfigFits(const KernelConfig& config, int64_t head_dim, const DeviceInfo& device) {
  const int64_t limit = device.shared_memory_per_block_optin > 0
                            ? device.shared_memory_per_block_optin
                            : kDefaultSharedOptin;
  return IsFlashConfigCompiled(config, head_dim) &&
         (config.algorithm.empty() || IsFlashWgmmaDevice(device)) &&
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
  // Hopper: the persistent warp-specialized kernel, 128 query rows, key tiles of 128 (64 at
  // D = 256, where larger ones do not fit) and 2 stages; 1.2-1.8x the wgmma kernel at every
  // head dim from 64 to 256, causal or not, dense or varlen. Its two variants trade places by
  // up to 10% from run to run; their means over five runs on an H200 (docs/PERFORMANCE_LOG.md,
  // the warp-specialized forward's scheduler, 2026-11-29): without turns ahead on dense calls
  // from D = 96 (D 128 at 8k tokens 639 against 615 TFLOP/s, D 256 620 against 591, D 96 478
  // against 474, causal even); with its consumers taking turns (ping-pong) ahead at D = 64
  // (332 against 308), whose short softmax leaves the tensor cores idle without them, and on
  // varlen (531 against 514), and with a bias, whose tile each consumer adds from shared memory
  // between its GEMMs (430 against 391-404 at [4,4096], two runs, 2026-11-29). D = 32 has no
  // such kernel (a row of 64 bytes): mma.sync.
  const FlashAlgorithm variant = problem.head_dim <= 64 || problem.varlen || problem.has_bias
                                     ? FlashAlgorithm::kWsPp
                                     : FlashAlgorithm::kWs;
  const KernelConfig hopper = MakeConfig(variant, 128, problem.head_dim <= 128 ? 128 : 64, 12, 2);
  if (FlashConfigFits(hopper, problem.head_dim, device)) return hopper;
  // Other GPUs, measured on an H100 (2026-11-22; in `git show caf8d6d:docs/PERFORMANCE.md`, not
  // in docs/PERFORMANCE_LOG.md): mma.sync with 4 warps x 64 query rows (two blocks per SM) beat
  // 8 warps x 128 rows by 2-7% from 8x2048 to 2x8192 tokens, causal or not, D 64 and 128. Key
  // tiles shrink as D grows so that S, O and the Q fragments stay in registers: 128 up to
  // D = 64, 64 up to D = 128, 32 at D = 256.
  const int block_k = problem.head_dim <= 64 ? 128 : problem.head_dim <= 128 ? 64 : 32;
  const KernelConfig preferred = MakeConfig(FlashAlgorithm::kMma, 64, block_k, 4, 2);
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
