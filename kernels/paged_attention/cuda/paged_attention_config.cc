#include "kernels/paged_attention/cuda/paged_attention_config.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/paged_attention/cuda/paged_attention_space.h"

namespace kernelserve::cuda {
namespace {

// Used when the device reports no SM count (an H100 SXM has 132).
constexpr int64_t kDefaultSmCount = 132;
// Splits past those that give the device four rounds of resident blocks only add combine
// traffic. Not two: a batch that alone takes 1.3 rounds needs splits to even its last round out
// (on an H200, 64 x 4k at D 128: 386.7 us with one split, 293.5 us with three, 2026-11-28).
constexpr int64_t kMaxRounds = 4;
// Split counts whose rounds are this close to the best one's count as equal: the smallest wins.
constexpr double kUtilizationSlack = 0.05;
// Tiles each half of a sequence keeps when a batch of more than a round of blocks is split in two
// (PagedAttentionHeuristic): on an H200, 128 x 1k (8 tiles a half) ran 85.2% of copy with one
// split and 83.9% with two (2026-11-28).
constexpr int64_t kMinTilesPerHalf = 16;
constexpr int kHeuristicWarps = kPagedNumWarps[0];
// Tokens of one tile: a split holds whole tiles, one at least (on an H200 a batch of one 1k
// sequence ran fastest with one tile a split, 2026-11-28).
constexpr int64_t kTileTokens = int64_t{kPagedTokensPerWarp} * kHeuristicWarps;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Tiles(const PagedAttentionShape& shape) {
  return CeilDiv(std::max<int64_t>(shape.max_seq_len, 0), kTileTokens);
}

// The splits of `splits` that get tiles: each takes ceil(tiles / splits) of them, so only
// ceil(tiles / that) have any (48 splits of 64 tiles leave 16 idle: as many blocks work as with
// 32).
int64_t WorkingSplits(int64_t tiles, int64_t splits) {
  if (tiles <= 0) return 1;
  return CeilDiv(tiles, CeilDiv(tiles, splits));
}

KernelConfig MakeConfig(int num_warps, int splits) {
  KernelConfig config;
  config.num_warps = num_warps;
  config.named[kPagedSplitsField] = splits;
  config.platform = "cuda";
  return config;
}

// The 16-row groups of one kv head's query rows, each a block.
int64_t RowGroups(const PagedAttentionShape& shape) {
  return CeilDiv(std::max<int64_t>(shape.rows_per_kv_head, 1), kPagedRowsPerBlock);
}

// Blocks one split of the shape launches: (kv head, 16-row group, sequence).
int64_t BlocksPerSplit(const PagedAttentionShape& shape) {
  return std::max<int64_t>(shape.batch, 1) * std::max<int64_t>(shape.num_heads_kv, 1) *
         RowGroups(shape);
}

// The largest split count the sequence length supports: a tile each.
int64_t MaxUsefulSplits(const PagedAttentionShape& shape) {
  return std::max<int64_t>(1, Tiles(shape));
}

// The fraction of the device's block slots that `blocks` keep busy over the rounds they take
// (1 for whole rounds; 1.5 rounds' worth of blocks keep 0.75 of two rounds busy).
double Utilization(int64_t blocks, int64_t slots) {
  const int64_t rounds = CeilDiv(blocks, slots);
  return static_cast<double>(blocks) / static_cast<double>(rounds * slots);
}

}  // namespace

PagedAttentionShape PagedAttentionShapeOf(const PagedAttentionProblem& problem) {
  const int64_t group = problem.num_heads_kv > 0 ? problem.num_heads_q / problem.num_heads_kv : 1;
  return {problem.dtype,
          problem.batch,
          problem.num_heads_kv,
          problem.seq_len_q * group,
          problem.max_pages * problem.page_size,
          problem.head_dim,
          IsFp8(problem.cache_dtype)};
}

const ConfigSchema& PagedAttentionCudaConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("num_warps", kPagedNumWarps.front(), kPagedNumWarps.back(), "none: always set",
                     "warps per block"),
      IntConfigField(kPagedSplitsField, 1, kPagedMaxSplits, "none: always set",
                     "paged_attention's split-KV slices of each sequence on cuda"),
  }};
  return *kSchema;
}

int PagedSplits(const KernelConfig& config) {
  const int64_t splits = config.Named(kPagedSplitsField);
  return splits >= 1 && splits <= kPagedMaxSplits ? static_cast<int>(splits) : 0;
}

bool IsPagedConfigCompiled(const KernelConfig& config) {
  if (std::find(kPagedNumWarps.begin(), kPagedNumWarps.end(), config.num_warps) ==
      kPagedNumWarps.end()) {
    return false;
  }
  if (PagedSplits(config) == 0 || config.named.size() != 1) return false;
  if (config.block_q != 0 || config.block_k != 0 || config.block_d != 0 || config.num_stages != 0 ||
      config.block_size != 0 || !config.algorithm.empty()) {
    return false;
  }
  return config.platform.empty() || config.platform == "cuda";
}

const std::vector<KernelConfig>& PagedAttentionCompiledConfigs() {
  static const std::vector<KernelConfig>* const configs = [] {
    auto* list = new std::vector<KernelConfig>();
    for (int warps : kPagedNumWarps) {
      for (int splits : kPagedSplits) list->push_back(MakeConfig(warps, splits));
    }
    return list;
  }();
  return *configs;
}

// Decode batches are often too small to fill 132 SMs with one block per (kv head, sequence), and
// a block's pages stream at the speed of one SM, so the tokens are split. Among the listed split
// counts that leave each split a tile of the longest sequence and make at most kMaxRounds rounds
// of blocks (PagedSplitBlocksPerSm per SM), the heuristic takes the one whose rounds keep the most
// block slots busy (B * Hkv * row_groups * the splits that get tiles close to a whole number of
// rounds, so that no half-empty last round doubles the time), the smallest within kUtilizationSlack
// of the best (relative: a batch that fills a few slots at most must not take one split because
// every option's share is small): fewer splits mean less partial output to combine. One split when
// the batch alone takes over kMaxRounds / 2 rounds, or two with 16-bit caches at D 128 (see the
// end).
KernelConfig PagedAttentionHeuristic(const PagedAttentionShape& shape, const DeviceInfo& device) {
  const int64_t sms =
      device.fingerprint.sm_count > 0 ? device.fingerprint.sm_count : kDefaultSmCount;
  const int64_t blocks = BlocksPerSplit(shape);
  const int64_t slots =
      sms * PagedSplitBlocksPerSm(shape.head_dim, shape.fp8_cache, RowGroups(shape), blocks, sms);
  const int64_t tiles = Tiles(shape);
  const int64_t most =
      std::min(MaxUsefulSplits(shape), std::max<int64_t>(1, kMaxRounds * slots / blocks));
  std::vector<std::pair<int, double>> options;
  double best = 0.0;
  for (int s : kPagedSplits) {
    if (s > most && s != 1) continue;
    const double u = Utilization(blocks * WorkingSplits(tiles, s), slots);
    options.push_back({s, u});
    best = std::max(best, u);
  }
  int chosen = 1;
  for (const auto& [s, u] : options) {
    if (u >= best * (1.0 - kUtilizationSlack)) {
      chosen = s;
      break;
    }
  }
  // More than a round of blocks at one split: blocks start as others end, so a step takes the
  // work over the slots plus the tail of its last blocks, which halves with blocks half as long
  // (H200, 2026-11-28, bf16 D 128: 128 x 4k and 128 x 16k read 86.3-88.7% of copy with one split,
  // 94.1-95.1% with two, at pages of 16, 64 and 256). Not for fp8 caches, whose blocks carry half
  // the bytes (128 x 16k: 79.0% with one split, 76.0% with two), nor at D 256, one block per SM
  // (32 x 4k: 81.8% with one split, 80.4% with two); D 64 was not measured past a round.
  if (chosen == 1 && !shape.fp8_cache && shape.head_dim == 128 && blocks > slots &&
      tiles >= 2 * kMinTilesPerHalf) {
    chosen = 2;
  }
  return MakeConfig(kHeuristicWarps, chosen);
}

std::vector<KernelConfig> PagedAttentionCandidates(const PagedAttentionShape& shape,
                                                   const DeviceInfo& device) {
  const KernelConfig best = PagedAttentionHeuristic(shape, device);
  const int best_splits = PagedSplits(best);
  // Neighbours of the heuristic's split count that leave each split a tile.
  const int64_t most = MaxUsefulSplits(shape);
  std::vector<int> splits = {1};
  const auto it = std::find(kPagedSplits.begin(), kPagedSplits.end(), best_splits);
  if (it != kPagedSplits.begin()) splits.push_back(*(it - 1));
  if (it + 1 != kPagedSplits.end() && *(it + 1) <= most) splits.push_back(*(it + 1));
  std::vector<KernelConfig> out = {best};
  for (int warps : kPagedNumWarps) {
    for (int s : splits) {
      const KernelConfig config = MakeConfig(warps, s);
      if (std::find(out.begin(), out.end(), config) == out.end()) out.push_back(config);
    }
  }
  return out;
}

}  // namespace kernelserve::cuda
