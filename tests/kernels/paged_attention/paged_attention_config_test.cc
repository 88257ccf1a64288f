// Config choice of the CUDA paged attention kernel: plain C++, so it runs in every build (no GPU,
// no CUDA toolkit needed).
#include "kernels/paged_attention/cuda/paged_attention_config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"

namespace kernelserve::cuda {
namespace {

// `bandwidth`: peak DRAM bytes per second (0 unknown).
DeviceInfo Gpu(int sm_count, double bandwidth = 0.0) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  device.fingerprint.kind = "gpu";
  device.fingerprint.sm_count = sm_count;
  device.memory_bandwidth = bandwidth;
  return device;
}

// Peak DRAM bandwidths (2 x memory clock x bus width, as EnumerateCudaDevices derives it; the
// H200's is what its runtime reported on 2026-11-28).
constexpr double kH100Bandwidth = 3.35e12;  // 25 GB/s per SM
constexpr double kH200Bandwidth = 4.81e12;  // 36 GB/s per SM

int Splits(const PagedAttentionShape& shape, const DeviceInfo& device) {
  return PagedSplits(PagedAttentionHeuristic(shape, device));
}

std::vector<PagedAttentionShape> Shapes() {
  std::vector<PagedAttentionShape> shapes;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t batch : {1, 3, 16, 64, 256, 4096}) {
      for (int64_t hkv : {1, 8, 32}) {
        for (int64_t rows : {1, 4, 8, 16, 32, 64}) {
          for (int64_t len : {0, 1, 100, 256, 4096, 32768, 1 << 20}) {
            for (int64_t d : {64, 128, 256}) {
              for (bool fp8 : {false, true}) {
                shapes.push_back({dtype, batch, hkv, rows, len, d, fp8});
              }
            }
          }
        }
      }
    }
  }
  return shapes;
}

std::string Describe(const PagedAttentionShape& s, int sms) {
  return absl::StrCat("B=", s.batch, " Hkv=", s.num_heads_kv, " rows=", s.rows_per_kv_head,
                      " max_seq_len=", s.max_seq_len, " D=", s.head_dim, " sms=", sms);
}

TEST(PagedAttentionConfigTest, CompiledConfigsPassTheSchemaAndAreCompiled) {
  const std::vector<KernelConfig>& configs = PagedAttentionCompiledConfigs();
  EXPECT_EQ(configs.size(), kPagedNumWarps.size() * kPagedSplits.size());
  for (const KernelConfig& config : configs) {
    EXPECT_TRUE(PagedAttentionCudaConfigSchema().Check(config, "paged_attention on cuda").ok())
        << config.DebugString();
    EXPECT_TRUE(IsPagedConfigCompiled(config)) << config.DebugString();
  }
}

TEST(PagedAttentionConfigTest, SchemaRefusesMissingOrOutOfRangeSplits) {
  KernelConfig config = PagedAttentionCompiledConfigs().front();
  config.named["splits"] = 0;
  EXPECT_FALSE(PagedAttentionCudaConfigSchema().Check(config, "paged").ok());
  EXPECT_FALSE(IsPagedConfigCompiled(config));
  config.named["splits"] = kPagedMaxSplits + 1;
  EXPECT_FALSE(PagedAttentionCudaConfigSchema().Check(config, "paged").ok());
  config.named["splits"] = 5;  // not listed, but any count launches
  EXPECT_TRUE(IsPagedConfigCompiled(config));
  config.block_q = 64;  // a field this kernel does not use
  EXPECT_FALSE(IsPagedConfigCompiled(config));
}

TEST(PagedAttentionConfigTest, HeuristicIsTheFirstCandidateAndCompiled) {
  const std::vector<KernelConfig>& compiled = PagedAttentionCompiledConfigs();
  for (int sms : {0, 1, 108, 132}) {
    for (const PagedAttentionShape& shape : Shapes()) {
      const DeviceInfo gpu = Gpu(sms, sms == 132 ? kH200Bandwidth : 0.0);
      const KernelConfig best = PagedAttentionHeuristic(shape, gpu);
      const std::vector<KernelConfig> candidates = PagedAttentionCandidates(shape, gpu);
      ASSERT_FALSE(candidates.empty()) << Describe(shape, sms);
      EXPECT_EQ(candidates.front(), best) << Describe(shape, sms);
      EXPECT_EQ(best, PagedAttentionHeuristic(shape, gpu)) << "not pure";
      for (const KernelConfig& c : candidates) {
        EXPECT_NE(std::find(compiled.begin(), compiled.end(), c), compiled.end())
            << Describe(shape, sms) << ": " << c.DebugString();
        EXPECT_EQ(std::count(candidates.begin(), candidates.end(), c), 1) << Describe(shape, sms);
      }
    }
  }
}

TEST(PagedAttentionConfigTest, SplitsFillTheDeviceButKeepATileEach) {
  for (double bandwidth : {0.0, kH100Bandwidth, kH200Bandwidth}) {
    const DeviceInfo gpu = Gpu(132, bandwidth);
    for (const PagedAttentionShape& shape : Shapes()) {
      SCOPED_TRACE(Describe(shape, 132));
      const int splits = Splits(shape, gpu);
      ASSERT_GE(splits, 1);
      const int64_t row_groups = (shape.rows_per_kv_head + 15) / 16;
      const int64_t blocks = shape.batch * shape.num_heads_kv * row_groups;
      const int fill =
          PagedSplitBlocksPerSm(shape.head_dim, shape.fp8_cache, row_groups, blocks, 132);
      ASSERT_LE(fill, PagedBlocksPerSm(shape.head_dim, shape.fp8_cache))
          << "the heuristic fills no more blocks than fit";
      const int64_t slots = 132 * fill;
      // A 16-bit cache's batch at D 128 of more than a round of blocks with 32 tiles or more:
      // halved.
      const bool halved = !shape.fp8_cache && shape.head_dim == 128 && blocks > slots &&
                          (shape.max_seq_len + 63) / 64 >= 32;
      if (splits > 1) {
        EXPECT_LE(splits, (shape.max_seq_len + 63) / 64) << "a tile (64 tokens) a split at least";
        // At most four rounds of resident blocks, but for a halved batch.
        if (!(halved && splits == 2)) EXPECT_LE(blocks * splits, 4 * slots);
      }
      if (blocks > 2 * slots) {
        EXPECT_EQ(splits, halved ? 2 : 1) << "the batch alone takes over two rounds";
      }
      if (blocks > slots && splits == 1) {
        EXPECT_FALSE(halved) << "more than a round of 16-bit blocks of 32 tiles is halved";
      }
      // A small batch of sequences of two tiles or more splits.
      if (blocks * 2 <= slots && shape.max_seq_len >= 128) {
        EXPECT_GT(splits, 1);
      }
    }
  }
}

TEST(PagedAttentionConfigTest, TypicalDecodeShapesOnAnH100) {
  const DeviceInfo h100 = Gpu(132, kH100Bandwidth);
  // Batch 1, 8 kv heads, 4k tokens (64 tiles): 8 blocks per split; 32 splits of two tiles fill
  // 256 of the 264 slots (2 per SM at D 128 with bf16 caches); 48 would leave 16 without a tile.
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 4096, 128}, h100), 32);
  // 128k tokens: 32 splits again; 48 would start a second round two thirds empty.
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 131072, 128}, h100), 32);
  // fp8 caches fill 4 per SM, but 3 where a split has at most half a block per SM: 48 splits
  // take 384 of 396 slots.
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 131072, 128, true}, h100), 48);
  // Batch 64 x 8 kv heads = 512 blocks, past the 264 slots of two per SM: counted in all 396
  // slots, one split leaves a second round two thirds empty; three fill 1536 of 1584.
  EXPECT_EQ(Splits({DType::kBF16, 64, 8, 4, 4096, 128}, h100), 3);
  // Batch 16 x 8 kv heads = 128 blocks: 2 splits fill 256 of 264 slots.
  EXPECT_EQ(Splits({DType::kBF16, 16, 8, 4, 4096, 128}, h100), 2);
  // Batch 32 x 8 kv heads = 256 blocks already fill 2 per SM: one split (2 with fp8 caches,
  // 512 of 528 slots).
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 4096, 128}, h100), 1);
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 4096, 128, true}, h100), 2);
  // D 256: one block per SM, 132 slots: 128 blocks already fill them.
  EXPECT_EQ(Splits({DType::kBF16, 16, 8, 4, 4096, 256}, h100), 1);
  // A short sequence (5 tiles) on its own: 3 splits give three blocks tiles, as 4 would.
  EXPECT_EQ(Splits({DType::kF16, 1, 1, 1, 300, 64}, h100), 3);
  // No SM count reported: 132 SMs assumed.
  EXPECT_EQ(PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128}, Gpu(0)),
            PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128}, h100));
}

// The fastest split counts measured on an H200 with every count timed (2026-11-28, 15:42 UTC,
// docs/PERFORMANCE_LOG.md), where the heuristic's fill (two blocks per SM at D 128 with 16-bit
// caches and one row group, every slot otherwise) reaches them.
TEST(PagedAttentionConfigTest, TypicalDecodeShapesOnAnH200) {
  const DeviceInfo h200 = Gpu(132, kH200Bandwidth);
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 1024, 128}, h200), 16);   // a tile a split
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 4096, 128}, h200), 32);   // 256 of 264 slots
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 16384, 128}, h200), 32);  // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 65536, 128}, h200), 32);  // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 8, 8, 4, 4096, 128}, h200), 4);    // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 8, 8, 4, 16384, 128}, h200), 4);   // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 1024, 128}, h200), 1);   // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 4096, 128}, h200), 1);   // 256 of 264
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 16, 4096, 128}, h200), 1);  // Sq 4: one row group
  EXPECT_EQ(Splits({DType::kBF16, 64, 8, 4, 4096, 128}, h200), 3);   // 1536 of 1584 (all 396)
  // Batch 128: 1024 blocks, 2.6 rounds of 396 slots, halved where each half keeps 16 tiles
  // (measured 2026-11-28 18:52 UTC: 1k 1 split, 4k and 16k 2 splits; fp8 16k 1 split).
  EXPECT_EQ(Splits({DType::kBF16, 128, 8, 4, 1024, 128}, h200), 1);
  EXPECT_EQ(Splits({DType::kBF16, 128, 8, 4, 4096, 128}, h200), 2);
  EXPECT_EQ(Splits({DType::kBF16, 128, 8, 4, 16384, 128}, h200), 2);
  EXPECT_EQ(Splits({DType::kBF16, 128, 8, 4, 16384, 128, true}, h200), 1);
  // D 256, one block per SM: 256 blocks take two rounds of 132, and one split read faster.
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 4096, 256}, h200), 1);
  // One kv head, 32 query rows: two row groups reading the same pages fill every slot (396).
  EXPECT_EQ(Splits({DType::kBF16, 32, 1, 32, 32768, 128}, h200), 6);  // 384 of 396
  // fp8 caches: 3 per SM (396 slots) for a split of at most half a block per SM (measured
  // 2026-11-28 night: 1 x 4k 32 splits 10.5 us, 64 12.2-12.3; 1 x 64k, 1 x 128k and 8 x 16k
  // equal or up to 1.5% faster), 4 per SM (528 slots) past it.
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 4096, 128, true}, h200), 32);    // 256 of 396
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 65536, 128, true}, h200), 48);   // 384 of 396
  EXPECT_EQ(Splits({DType::kBF16, 1, 8, 4, 131072, 128, true}, h200), 48);  // 384 of 396
  EXPECT_EQ(Splits({DType::kBF16, 8, 8, 4, 16384, 128, true}, h200), 6);    // 384 of 396
  EXPECT_EQ(Splits({DType::kBF16, 16, 8, 4, 4096, 128, true}, h200), 4);    // 512 of 528
  EXPECT_EQ(Splits({DType::kBF16, 32, 8, 4, 16384, 128, true}, h200), 2);   // 512 of 528
}

TEST(PagedAttentionConfigTest, ShapeOfPacksGqaRowsAndBoundsTheLength) {
  PagedAttentionProblem problem;
  problem.dtype = DType::kBF16;
  problem.batch = 3;
  problem.seq_len_q = 4;
  problem.num_heads_q = 32;
  problem.num_heads_kv = 8;
  problem.head_dim = 128;
  problem.page_size = 16;
  problem.max_pages = 10;
  const PagedAttentionShape shape = PagedAttentionShapeOf(problem);
  EXPECT_EQ(shape.rows_per_kv_head, 16);
  EXPECT_EQ(shape.max_seq_len, 160);
  EXPECT_EQ(shape.batch, 3);
  EXPECT_EQ(shape.num_heads_kv, 8);
  EXPECT_EQ(shape.head_dim, 128);
  EXPECT_FALSE(shape.fp8_cache);
  problem.cache_dtype = DType::kF8E4M3;
  EXPECT_TRUE(PagedAttentionShapeOf(problem).fp8_cache);
}

}  // namespace
}  // namespace kernelserve::cuda
