// The values each config field of the CUDA mean pooling kernel may take. Plain C++ (no CUDA
// types): the config choice (mean_pooling_config.cc, built without CUDA too) and the launch code
// (built with CUDA) share these lists, so a config the heuristic names is always one the launch
// accepts.
//
// Meaning of the KernelConfig fields for this kernel (its schema: MeanPoolingCudaConfigSchema):
//   num_warps   threads per block / 32.
//   "lanes"     (a named field) threads side by side along H in a block. Each lane covers one
//               16-byte vector of a row (8 f16/bf16 or 4 f32 values) when H allows it, else one
//               value. The block's other threads (num_warps * 32 / lanes groups) take other rows.
//   num_stages  rows each thread loads before adding any of them (loads in flight); a
//               compile-time constant of the kernel.
//   block_size  rows per chunk: the rows of x one block sums. Sequences longer than a chunk are
//               split over several blocks and combined in a fixed order (deterministic).
//   platform    "cuda" (or "" when given by hand).
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_SPACE_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_SPACE_H_

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/kernel_config.h"

namespace kernelserve::cuda {

// The named config field of the lanes (before config schema 2: block_d).
inline constexpr char kPoolLanesField[] = "lanes";

// Threads per block at most (the kernel's launch bound and its shared-memory sizing).
inline constexpr int kPoolMaxThreads = 256;
inline constexpr std::array<int, 2> kPoolNumWarps = {4, 8};
inline constexpr std::array<int, 9> kPoolLanes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
// Compiled as template arguments: see mean_pooling_dispatch.cc.
inline constexpr std::array<int, 2> kPoolStages = {4, 8};
inline constexpr std::array<int, 8> kPoolBlockRows = {32, 64, 128, 256, 512, 1024, 2048, 4096};
// Grid limits of one launch: chunks go to gridDim.x, hidden tiles to gridDim.y.
inline constexpr int64_t kPoolMaxChunks = 2147483647;
inline constexpr int64_t kPoolMaxTiles = 65535;

// Values per lane: a 16-byte vector when a row of `hidden` values of `item_size` bytes is a
// whole number of them (rows then start 16-byte aligned), else 1.
constexpr int PoolVectorWidth(int64_t item_size, int64_t hidden) {
  const int64_t width = 16 / item_size;
  return hidden % width == 0 ? static_cast<int>(width) : 1;
}

// ceil(a / b) for a >= 0, b > 0, without overflow near INT64_MAX.
constexpr int64_t PoolCeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The lanes of `config` (its named field "lanes"), 0 when unset or out of range.
inline int PoolLanes(const KernelConfig& config) {
  const int64_t lanes = config.Named(kPoolLanesField);
  return lanes > 0 && lanes <= kPoolLanes.back() ? static_cast<int>(lanes) : 0;
}

// True when `config` lies in the compiled space: each field one of the values above, lanes at
// most the block's threads, the fields this kernel does not use zero or empty, platform "cuda"
// or "". `priority` is free.
inline bool IsPoolingConfigCompiled(const KernelConfig& config) {
  auto in = [](const auto& values, int v) {
    return std::find(values.begin(), values.end(), v) != values.end();
  };
  const int lanes = PoolLanes(config);
  return in(kPoolNumWarps, config.num_warps) && in(kPoolLanes, lanes) &&
         lanes <= 32 * config.num_warps && in(kPoolStages, config.num_stages) &&
         in(kPoolBlockRows, config.block_size) && config.block_q == 0 && config.block_k == 0 &&
         config.block_d == 0 && config.named.size() == 1 &&
         (config.platform.empty() || config.platform == "cuda") && config.algorithm.empty();
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_SPACE_H_
