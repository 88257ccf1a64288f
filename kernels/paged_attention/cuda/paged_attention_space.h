// The values each config field of the CUDA paged attention kernel may take. Plain C++ (no CUDA
// types): the config choice (paged_attention_config.cc, built without CUDA too), the dispatch and
// the launch code share these lists, so a config the heuristic names is always one that runs.
//
// Meaning of the KernelConfig fields for this kernel (its schema: PagedAttentionCudaConfigSchema):
//   num_warps  threads per block / 32; a compile-time constant of the kernel. Each warp takes
//              its own 16 tokens of every tile, so a tile holds num_warps * 16 tokens.
//   "splits"   (a named field) slices of each sequence's tokens attended by separate blocks
//              (split-KV, flash-decoding); more than 1 adds a combine pass. A run-time argument.
//   platform   "cuda" (or "" when given by hand).
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_SPACE_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_SPACE_H_

#include <array>
#include <cstdint>

namespace kernelserve::cuda {

// The named config field of the split count.
inline constexpr char kPagedSplitsField[] = "splits";

// Compiled as template arguments (paged_attention_instances.h).
inline constexpr std::array<int, 1> kPagedNumWarps = {4};
inline constexpr std::array<int, 3> kPagedHeadDims = {64, 128, 256};
// The split counts configs may name: every count launches (splits is a run-time argument); the
// list only keeps the autotune space small while stepping by at most 1.5x.
inline constexpr std::array<int, 14> kPagedSplits = {1,  2,  3,  4,  6,  8,  12,
                                                     16, 24, 32, 48, 64, 96, 128};
inline constexpr int kPagedMaxSplits = 128;
// Query rows (GQA heads x new tokens of one kv head) one block computes: one m16 tile of the
// tensor cores. More rows take more blocks (grid.y), each reading the same pages.
inline constexpr int kPagedRowsPerBlock = 16;
// Tokens per warp per tile.
inline constexpr int kPagedTokensPerWarp = 16;

// Attention blocks resident on one SM (paged_attention_device.cuh checks its shared memory
// against this and holds the kernel's registers to it): a two-stage ring of about 40 KiB (D 64),
// 75 KiB (D 128) and 143 KiB (D 256) per block in the 228 KiB of an SM with 16-bit caches, about
// half with fp8 caches (42 KiB at D 128, 4 blocks by registers; 78 KiB at D 256). More resident
// blocks beat deeper rings: with three stages and two blocks per SM the kernel read 59-63% of
// the copy bandwidth at D 128, with two stages and three blocks 73-83% (H200, 2026-11-28); a
// four-stage ring with one block per SM for small batches was no faster than two stages with
// more splits (H100, 2026-11-28; docs/PERFORMANCE_LOG.md). With fp8 caches at D 128 the
// fastest split counts on an H200 were those that fill four blocks per SM (1 x 64k/128k: 64
// splits, 8 x 16k: 8, 32 x 4k/16k: 2; 2026-11-28).
constexpr int PagedBlocksPerSm(int64_t head_dim, bool fp8_cache) {
  if (fp8_cache) return head_dim >= 256 ? 2 : 4;
  return head_dim >= 256 ? 1 : (head_dim >= 128 ? 3 : 4);
}

// DRAM bandwidth per SM (bytes per second) from which the split heuristic fills every block slot
// at D 128 with 16-bit caches; below it, two of the three.
inline constexpr double kPagedFillAllSlotsBandwidthPerSm = 30e9;

// The blocks per SM the split heuristic fills (paged_attention_config.cc), given the device's
// DRAM bandwidth per SM (`bandwidth_per_sm`, bytes per second; 0 unknown). An SM keeps about
// (its share of the bandwidth x the memory latency) bytes in flight, and each block holds a
// tile or two: a device with more bandwidth per SM needs more blocks. Timed for every split
// count at batches of 8 and less: on an H100 SXM (3.35 TB/s over 132 SMs, 25 GB/s each;
// 2026-11-28, before the combine pass was made parallel) two per SM at D 128 with 16-bit caches
// gave the fastest counts at 1 x 16k/64k/128k, 8 x 4k/16k and 32 x 1k/4k (up to 14% faster
// than three); on an H200 (4.8 TB/s by its clock and bus, 36 GB/s each; 2026-11-28, after)
// three gave them at 1 x 16k/64k/128k, 8 x 1k/4k/16k and 32 x 4k/16k (up to 30% faster than
// two). fp8 caches (half the bytes a token) fill every slot on both. Unknown bandwidth counts
// as an H100's.
constexpr int PagedSplitBlocksPerSm(int64_t head_dim, bool fp8_cache, double bandwidth_per_sm) {
  if (head_dim >= 128 && head_dim < 256 && !fp8_cache &&
      bandwidth_per_sm < kPagedFillAllSlotsBandwidthPerSm) {
    return 2;
  }
  return PagedBlocksPerSm(head_dim, fp8_cache);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_SPACE_H_
