#include "core/utils/math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kernelserve {
namespace {

template <typename T>
T LogSumExpImpl(absl::Span<const T> values) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T max = kNegInf;
  for (T v : values) {
    if (std::isnan(v)) return v;
    max = std::max(max, v);
  }
  // All -inf (or empty): exp(-inf - -inf) would be NaN, the answer is -inf. +inf dominates.
  if (std::isinf(max)) return max;
  double sum = 0.0;
  for (T v : values) sum += std::exp(static_cast<double>(v) - static_cast<double>(max));
  return static_cast<T>(static_cast<double>(max) + std::log(sum));
}

}  // namespace

double LogSumExp(absl::Span<const double> values) { return LogSumExpImpl(values); }
float LogSumExp(absl::Span<const float> values) { return LogSumExpImpl(values); }

double SafeDivide(double a, double b) { return b == 0.0 ? 0.0 : a / b; }
float SafeDivide(float a, float b) { return b == 0.0f ? 0.0f : a / b; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int SelectNumWarps(int block_q, int block_k, int head_dim) {
  // A tensor-core MMA tile covers 16 query rows, so splitting block_q over more than
  // block_q / 16 warps leaves warps idle. Big tiles (>= 128 query rows with a wide key tile or
  // head) carry enough work per block to hide latency with 8 warps; smaller tiles use 4,
  // which keeps registers per thread within bounds for head_dim up to 256.
  const int max_by_rows = std::max(1, block_q / 16);
  const bool big_tile = block_q >= 128 && (block_k >= 64 || head_dim >= 128);
  const int wanted = big_tile ? 8 : 4;
  int warps = 1;
  while (warps * 2 <= std::min(wanted, max_by_rows)) warps *= 2;
  return warps;
}

int SelectNumStages(int head_dim, DType dtype, int64_t shared_memory_bytes) {
  // Reference tile of 64 rows: the Q tile stays resident, and every pipeline stage holds one
  // K and one V tile. Deeper pipelines hide more copy latency, but past 4 stages the gain is
  // negligible while occupancy drops, so the depth is what fits, clamped to [1, 4].
  constexpr int64_t kTileRows = 64;
  const int64_t tile_bytes = kTileRows * head_dim * static_cast<int64_t>(ItemSize(dtype));
  const int64_t per_stage = 2 * tile_bytes;
  const int64_t available = shared_memory_bytes - tile_bytes;
  if (available < per_stage) return 1;
  return static_cast<int>(std::min<int64_t>(4, available / per_stage));
}

}  // namespace kernelserve
