#include "kernels/mean_pooling/cuda/mean_pooling_config.h"

#include <algorithm>

#include "kernels/mean_pooling/cuda/mean_pooling_space.h"

namespace kernelserve::cuda {
namespace {

// How the heuristic launches each form. Measured on an H100 (docs/PERFORMANCE.md):
// - dense and varlen blocks all do the same work: about one wave of 4-warp blocks, all resident
//   at once (8 fit an SM), beat two waves of half-size ones, which pay twice the partial sums;
// - masked blocks do uneven work (rows whose mask is 0 are skipped) and each x load waits for a
//   mask load: 8 warps with 8 rows in flight each, and four times the blocks to even out.
struct FormPlan {
  int warps;
  int stages;
  int64_t blocks_per_sm;
};
constexpr FormPlan kUniformPlan = {4, 4, 7};
constexpr FormPlan kMaskedPlan = {8, 8, 28};
// Used when the device reports no SM count (an H100 SXM has 132).
constexpr int64_t kDefaultSmCount = 132;
// Lanes the heuristic prefers along H: 64 lanes of 16 bytes read 1 KiB of a row, and a block of
// 4 warps then takes 2 rows at a time.
constexpr int kPreferredLanes = 64;

FormPlan PlanFor(const MeanPoolingShape& shape) {
  return shape.form == PoolingForm::kMasked ? kMaskedPlan : kUniformPlan;
}

KernelConfig MakeConfig(int num_warps, int lanes, int stages, int block_rows) {
  KernelConfig config;
  config.num_warps = num_warps;
  config.named[kPoolLanesField] = lanes;
  config.num_stages = stages;
  config.block_size = block_rows;
  config.platform = "cuda";
  return config;
}

// Lanes needed to cover a row once: vectors (or values) per row rounded up to a power of two.
int LanesForRow(const MeanPoolingShape& shape) {
  const int64_t item = static_cast<int64_t>(ItemSize(shape.dtype));
  const int64_t per_row =
      PoolCeilDiv(std::max<int64_t>(shape.hidden, 1), PoolVectorWidth(item, shape.hidden));
  int lanes = 1;
  while (lanes < per_row && lanes < kPoolLanes.back()) lanes *= 2;
  return lanes;
}

int64_t Tiles(const MeanPoolingShape& shape, int lanes) {
  const int64_t item = static_cast<int64_t>(ItemSize(shape.dtype));
  const int64_t per_row =
      PoolCeilDiv(std::max<int64_t>(shape.hidden, 1), PoolVectorWidth(item, shape.hidden));
  return PoolCeilDiv(per_row, lanes);
}

// The largest chunk that still gives plan.blocks_per_sm blocks per SM, but no smaller than one
// full round of loads for every thread (groups * stages rows).
int HeuristicBlockRows(const MeanPoolingShape& shape, const DeviceInfo& device, int lanes,
                       const FormPlan& plan) {
  const int64_t groups = plan.warps * 32 / lanes;
  const int64_t min_rows = groups * plan.stages;
  const int64_t sms =
      device.fingerprint.sm_count > 0 ? device.fingerprint.sm_count : kDefaultSmCount;
  const int64_t target_blocks = sms * plan.blocks_per_sm;
  const int64_t tiles = Tiles(shape, lanes);
  int chosen = 0;
  for (int rows : kPoolBlockRows) {
    if (rows < min_rows && rows != kPoolBlockRows.back()) continue;
    if (chosen == 0) chosen = rows;  // the smallest allowed: for problems too small to fill
    if (PoolCeilDiv(shape.total_rows, rows) * tiles >= target_blocks) chosen = rows;
  }
  return chosen;
}

int HeuristicLanes(const MeanPoolingShape& shape) {
  return std::min(LanesForRow(shape), kPreferredLanes);
}

// Neighbours of `value` in `values` (the value itself first, then one step down and up).
template <typename Values>
std::vector<int> Around(const Values& values, int value) {
  std::vector<int> out = {value};
  auto it = std::find(values.begin(), values.end(), value);
  if (it == values.end()) return out;
  if (it != values.begin()) out.push_back(*(it - 1));
  if (it + 1 != values.end()) out.push_back(*(it + 1));
  return out;
}

}  // namespace

MeanPoolingShape MeanPoolingShapeOf(const MeanPoolingProblem& problem) {
  return {problem.form, problem.dtype, problem.num_sequences, problem.total_rows, problem.hidden};
}

const ConfigSchema& MeanPoolingCudaConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("num_warps", kPoolNumWarps.front(), kPoolNumWarps.back(), "none: always set",
                     "warps per block"),
      IntConfigField(kPoolLanesField, kPoolLanes.front(), kPoolLanes.back(), "none: always set",
                     "mean_pooling's lanes on cuda (threads side by side along H)",
                     /*replaces=*/"block_d"),
      IntConfigField("num_stages", kPoolStages.front(), kPoolStages.back(), "none: always set",
                     "rows each thread loads before adding any"),
      IntConfigField("block_size", kPoolBlockRows.front(), kPoolBlockRows.back(),
                     "none: always set", "rows per chunk"),
  }};
  return *kSchema;
}

const std::vector<KernelConfig>& MeanPoolingCompiledConfigs() {
  static const std::vector<KernelConfig>* const configs = [] {
    auto* list = new std::vector<KernelConfig>();
    for (int warps : kPoolNumWarps) {
      for (int lanes : kPoolLanes) {
        if (lanes > warps * 32) continue;
        for (int stages : kPoolStages) {
          for (int rows : kPoolBlockRows) list->push_back(MakeConfig(warps, lanes, stages, rows));
        }
      }
    }
    return list;
  }();
  return *configs;
}

std::vector<KernelConfig> MeanPoolingCandidates(const MeanPoolingShape& shape,
                                                const DeviceInfo& device) {
  const KernelConfig best = MeanPoolingHeuristic(shape, device);
  const int max_lanes = LanesForRow(shape);
  std::vector<KernelConfig> out = {best};
  for (int lanes : Around(kPoolLanes, PoolLanes(best))) {
    if (lanes > max_lanes) continue;  // lanes past the row's end only idle
    for (int warps : kPoolNumWarps) {
      if (lanes > warps * 32 || Tiles(shape, lanes) > kPoolMaxTiles) continue;
      for (int stages : kPoolStages) {
        for (int rows : Around(kPoolBlockRows, best.block_size)) {
          const KernelConfig config = MakeConfig(warps, lanes, stages, rows);
          if (std::find(out.begin(), out.end(), config) == out.end()) out.push_back(config);
        }
      }
    }
  }
  return out;
}

KernelConfig MeanPoolingHeuristic(const MeanPoolingShape& shape, const DeviceInfo& device) {
  const int lanes = HeuristicLanes(shape);
  const FormPlan plan = PlanFor(shape);
  return MakeConfig(plan.warps, lanes, plan.stages, HeuristicBlockRows(shape, device, lanes, plan));
}

}  // namespace kernelserve::cuda
