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
// against this and holds the kernel's registers to it): a two-stage ring of about 40 KiB (D 64)
// and 75 KiB (D 128) per block in the 228 KiB of an SM with 16-bit caches, and a three-stage one
// of 206 KiB at D 256 (one block fits with two stages, 143 KiB, as well; its third stage keeps
// two tiles in flight: 32 x 4k read 84.6% -> 92.8% of the copy bandwidth on an H200,
// 2026-11-28); about half with fp8 caches (42 KiB at D 128, 4 blocks by registers; 78 KiB at
// D 256 with two stages). Where more blocks fit, more resident blocks beat deeper rings: with
// three stages and two blocks per SM the kernel read 59-63% of the copy bandwidth at D 128,
// with two stages and three blocks 73-83% (H200, 2026-11-28); a four-stage ring with one block
// per SM for small batches was no faster than two stages with more splits (H100, 2026-11-28;
// docs/PERFORMANCE_LOG.md). With fp8 caches at D 128 the fastest split counts on an H200 were
// those that fill four blocks per SM at batch 32 (32 x 4k/16k: 2 splits; 2026-11-28), three
// for smaller batches (PagedSplitBlocksPerSm).
constexpr int PagedBlocksPerSm(int64_t head_dim, bool fp8_cache) {
  if (fp8_cache) return head_dim >= 256 ? 2 : 4;
  return head_dim >= 256 ? 1 : (head_dim >= 128 ? 3 : 4);
}

// The blocks per SM the split heuristic fills (paged_attention_config.cc) for a split of
// `blocks` blocks of `row_groups` 16-row groups per kv head on `sms` SMs. An SM keeps about (its
// share of the bandwidth x the memory latency) bytes in flight, and each block holds two tiles: at
// D 128 with 16-bit caches two blocks (128 KiB in flight) are enough, and a third only adds blocks
// that contend for the same SM. Timed for every split count: on an H200 (4.8 TB/s, 36 GB/s per SM;
// 2026-11-28, the kernel of c43c05b) two gave the fastest counts at 1 x 16k/64k/128k, 8 x 1k/4k/16k
// and 32 x 1k/4k (1 x 64k 86.2 -> 74.8 us, 32 x 1k 46.4 -> 39.7 us against three), within 1% of
// them at 32 x 16k; on an H100 (25 GB/s per SM; the kernel before) the same. Blocks of two or more
// row groups read the same pages, all but the first from L2, so they fill every slot (32 x 32k with
// one kv head: 209.7 us filling three, 241.7 filling two). fp8 caches (half the bytes a token)
// fill every slot too (their fastest counts on the H200), D 64 and D 256 as well, but at D 128
// a split of at most half a block per SM (a batch of up to 8 sequences at Hkv 8) fills three of
// the four: there the fourth only made the splits shorter and the combine longer (H200,
// 2026-11-28 night, each shape timed alone twice per rule: 1 x 4k 10.5 us with 32 splits
// against 12.2-12.3 with 64; 1 x 64k, 1 x 128k and 8 x 16k equal or up to 1.5% faster; 16 x 4k
// keeps 4 splits). A batch that alone passes two per SM is packed into every slot an SM
// holds, so its rounds are counted in them (64 x 4k at D 128 on an H200: one split 341.4 us,
// three 276.2 us).
constexpr int PagedSplitBlocksPerSm(int64_t head_dim, bool fp8_cache, int64_t row_groups,
                                    int64_t blocks, int64_t sms) {
  const bool d128 = head_dim >= 128 && head_dim < 256 && row_groups <= 1;
  if (d128 && !fp8_cache && blocks <= 2 * sms) return 2;
  if (d128 && fp8_cache && 2 * blocks <= sms) return 3;
  return PagedBlocksPerSm(head_dim, fp8_cache);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_SPACE_H_
