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

DeviceInfo Gpu(int sm_count) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  device.fingerprint.kind = "gpu";
  device.fingerprint.sm_count = sm_count;
  return device;
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
      const KernelConfig best = PagedAttentionHeuristic(shape, Gpu(sms));
      const std::vector<KernelConfig> candidates = PagedAttentionCandidates(shape, Gpu(sms));
      ASSERT_FALSE(candidates.empty()) << Describe(shape, sms);
      EXPECT_EQ(candidates.front(), best) << Describe(shape, sms);
      EXPECT_EQ(best, PagedAttentionHeuristic(shape, Gpu(sms))) << "not pure";
      for (const KernelConfig& c : candidates) {
        EXPECT_NE(std::find(compiled.begin(), compiled.end(), c), compiled.end())
            << Describe(shape, sms) << ": " << c.DebugString();
        EXPECT_EQ(std::count(candidates.begin(), candidates.end(), c), 1) << Describe(shape, sms);
      }
    }
  }
}

TEST(PagedAttentionConfigTest, SplitsFillTheDeviceButKeepAtLeast256TokensEach) {
  const DeviceInfo h100 = Gpu(132);
  for (const PagedAttentionShape& shape : Shapes()) {
    const int splits = PagedSplits(PagedAttentionHeuristic(shape, h100));
    ASSERT_GE(splits, 1) << Describe(shape, 132);
    const int64_t slots = 132 * PagedSplitBlocksPerSm(shape.head_dim, shape.fp8_cache);
    ASSERT_LE(PagedSplitBlocksPerSm(shape.head_dim, shape.fp8_cache),
              PagedBlocksPerSm(shape.head_dim))
        << "the heuristic fills no more blocks than fit";
    const int64_t row_groups = (shape.rows_per_kv_head + 15) / 16;
    const int64_t blocks = shape.batch * shape.num_heads_kv * row_groups;
    if (splits > 1) {
      EXPECT_GE(shape.max_seq_len / splits, 256) << Describe(shape, 132);
      // At most two rounds of resident blocks.
      EXPECT_LE(blocks * splits, 2 * slots) << Describe(shape, 132);
    }
    if (blocks > slots) {
      EXPECT_EQ(splits, 1) << "the batch alone fills " << Describe(shape, 132);
    }
    // Splitting is never worse at filling the slots than the split count one below it allows.
    if (blocks * 2 <= slots && shape.max_seq_len >= 512) {
      EXPECT_GT(splits, 1) << "a small batch of long sequences splits " << Describe(shape, 132);
    }
  }
}

TEST(PagedAttentionConfigTest, TypicalDecodeShapes) {
  const DeviceInfo h100 = Gpu(132);
  // Batch 1, 8 kv heads, 4k tokens: 8 blocks per split; 4096 / 256 = 16 splits at most.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 4096, 128}, h100)), 16);
  // Batch 1, 8 kv heads, 128k tokens: 32 splits fill 256 of the 264 slots (2 per SM at D 128
  // with bf16 caches), 97%; 48 would start a second round two thirds empty.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128}, h100)), 32);
  // fp8 caches fill 3 per SM: 48 splits take 384 of 396 slots.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128, true}, h100)),
            48);
  // Batch 64 x 8 kv heads = 512 blocks: already two rounds.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 64, 8, 4, 4096, 128}, h100)), 1);
  // Batch 16 x 8 kv heads = 128 blocks: 2 splits fill 256 of 264 slots, 3 would start a second
  // round mostly empty.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 16, 8, 4, 4096, 128}, h100)), 2);
  // Batch 32 x 8 kv heads = 256 blocks already fill 2 per SM: one split (3 with fp8 caches,
  // 768 of 792 slots over two rounds).
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 32, 8, 4, 4096, 128}, h100)), 1);
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 32, 8, 4, 4096, 128, true}, h100)),
            3);
  // D 256: one block per SM, 132 slots: 128 blocks already fill them.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kBF16, 16, 8, 4, 4096, 256}, h100)), 1);
  // Short sequences never split.
  EXPECT_EQ(PagedSplits(PagedAttentionHeuristic({DType::kF16, 1, 1, 1, 300, 64}, h100)), 1);
  // No SM count reported: 132 assumed.
  EXPECT_EQ(PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128}, Gpu(0)),
            PagedAttentionHeuristic({DType::kBF16, 1, 8, 4, 131072, 128}, h100));
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
