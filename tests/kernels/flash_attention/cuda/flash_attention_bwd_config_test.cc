// Config choice, dispatch and refusals of the CUDA flash attention backward. None of these
// needs a GPU: they run in CI.
#include "kernels/flash_attention/cuda/flash_attention_bwd_config.h"

#include <algorithm>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_cuda.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_dispatch.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"

namespace kernelserve::cuda {
namespace {

using ::testing::HasSubstr;

DeviceInfo Gpu(int64_t shared_optin) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  device.fingerprint.kind = "gpu";
  device.fingerprint.sm_count = 132;
  device.shared_memory_per_block_optin = shared_optin;
  return device;
}

FlashAttentionBwdProblem MakeProblem(DType dtype, int64_t d) {
  FlashAttentionBwdProblem p;
  p.fwd.dtype = dtype;
  p.fwd.num_sequences = 2;
  p.fwd.seq_len_q = p.fwd.seq_len_k = 1024;
  p.fwd.total_q = p.fwd.total_k = 2048;
  p.fwd.num_heads_q = p.fwd.num_heads_kv = 16;
  p.fwd.head_dim = d;
  return p;
}

TEST(FlashAttentionBwdConfigTest, HeuristicIsACompiledCandidateThatDispatches) {
  for (int64_t shared : {int64_t{0}, int64_t{227} * 1024, int64_t{100} * 1024}) {
    const DeviceInfo device = Gpu(shared);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      for (int64_t d : {64, 128}) {
        const FlashAttentionBwdProblem p = MakeProblem(dtype, d);
        const KernelConfig heuristic = FlashAttentionBwdHeuristic(p, device);
        EXPECT_TRUE(FlashBwdConfigFits(heuristic, d, device)) << heuristic.DebugString();
        const std::vector<KernelConfig> candidates = FlashAttentionBwdCandidates(p, device);
        ASSERT_FALSE(candidates.empty());
        EXPECT_EQ(candidates.front(), heuristic);
        for (const KernelConfig& config : candidates) {
          EXPECT_TRUE(FlashBwdConfigFits(config, d, device)) << config.DebugString();
          EXPECT_TRUE(SelectFlashBwdLaunch(dtype, d, config).ok()) << config.DebugString();
        }
      }
    }
  }
  // On an H100-like device: key tiles of 128 at D = 64, of 64 at D = 128.
  EXPECT_EQ(FlashAttentionBwdHeuristic(MakeProblem(DType::kBF16, 64), Gpu(0)).block_k, 128);
  EXPECT_EQ(FlashAttentionBwdHeuristic(MakeProblem(DType::kBF16, 128), Gpu(0)).block_k, 64);
}

TEST(FlashAttentionBwdConfigTest, HopperTakesTheWgmmaKernelWhereCompiled) {
  DeviceInfo hopper = Gpu(0);
  hopper.fingerprint.cc_major = 9;
  hopper.fingerprint.cc_minor = 0;
  DeviceInfo ampere = Gpu(0);
  ampere.fingerprint.cc_major = 8;
  for (int64_t d : {64, 128}) {
    const FlashAttentionBwdProblem p = MakeProblem(DType::kF16, d);
    const KernelConfig chosen = FlashAttentionBwdHeuristic(p, hopper);
#ifdef KERNELSERVE_FLASH_WGMMA
    EXPECT_EQ(chosen.algorithm, "wgmma");
    EXPECT_EQ(chosen.block_q, 64);
    EXPECT_EQ(chosen.block_k, 128);
    EXPECT_TRUE(SelectFlashBwdLaunch(DType::kBF16, d, chosen).ok());
#else
    EXPECT_EQ(chosen.algorithm, "");
#endif
    EXPECT_TRUE(FlashBwdConfigFits(chosen, d, hopper));
    // No other GPU runs it: not a candidate there, and the heuristic is a mma.sync config.
    for (const KernelConfig& config : FlashAttentionBwdCandidates(p, ampere)) {
      EXPECT_EQ(config.algorithm, "") << config.DebugString();
    }
    for (const KernelConfig& config : FlashAttentionBwdCompiledConfigs(d)) {
      if (config.algorithm.empty()) continue;
      EXPECT_FALSE(FlashBwdConfigFits(config, d, ampere));
      KernelConfig mma = config;
      mma.algorithm.clear();
      EXPECT_TRUE(SelectFlashBwdLaunch(DType::kF16, d, mma).ok());  // block_k 128 on mma.sync
      KernelConfig unknown = config;
      unknown.algorithm = "tcgen05";
      EXPECT_EQ(SelectFlashBwdLaunch(DType::kF16, d, unknown).status().code(),
                absl::StatusCode::kUnimplemented);
    }
  }
}

TEST(FlashAttentionBwdConfigTest, EveryCompiledConfigDispatchesAndOthersDoNot) {
  for (int64_t d : {64, 128}) {
    for (const KernelConfig& config : FlashAttentionBwdCompiledConfigs(d)) {
      EXPECT_TRUE(IsFlashBwdConfigCompiled(config, d));
      KernelConfig bare = config;
      bare.platform.clear();
      EXPECT_TRUE(IsFlashBwdConfigCompiled(bare, d));
      EXPECT_TRUE(SelectFlashBwdLaunch(DType::kF16, d, config).ok());
    }
  }
  KernelConfig odd;
  odd.block_q = 48;
  odd.block_k = 64;
  EXPECT_FALSE(IsFlashBwdConfigCompiled(odd, 64));
  absl::StatusOr<FlashBwdLaunchFn> none = SelectFlashBwdLaunch(DType::kBF16, 64, odd);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(none.status().message(), HasSubstr("block_q 48"));
  EXPECT_FALSE(SelectFlashBwdLaunch(DType::kF32, 64, FlashAttentionBwdCompiledConfigs(64)[0]).ok());
  EXPECT_TRUE(FlashAttentionBwdCompiledConfigs(96).empty());
}

TEST(FlashAttentionBwdConfigTest, WhatTheOwnKernelsRefuseIsUnimplementedAndNamed) {
  EXPECT_TRUE(CheckFlashBwdProblemSupported(MakeProblem(DType::kBF16, 128)).ok());
  const absl::Status f32 = CheckFlashBwdProblemSupported(MakeProblem(DType::kF32, 64));
  EXPECT_EQ(f32.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f32.message(), HasSubstr("dtype f32"));
  const absl::Status d96 = CheckFlashBwdProblemSupported(MakeProblem(DType::kBF16, 96));
  EXPECT_EQ(d96.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(d96.message(), HasSubstr("head dim 96"));
  FlashAttentionBwdProblem dbias = MakeProblem(DType::kBF16, 64);
  dbias.fwd.has_bias = true;
  dbias.return_dbias = true;
  EXPECT_TRUE(CheckFlashBwdProblemSupported(dbias).ok());  // the dbias kernel
  EXPECT_TRUE(FlashAttentionBwdCandidates(MakeProblem(DType::kF32, 64), Gpu(0)).empty());
}

// The wgmma kernel gives each query head of a group its own blocks only where the work per key
// tile differs (a causal mask or a window) and there is a group to split.
TEST(FlashAttentionBwdConfigTest, GroupsAreSplitOnlyUnderUnevenMasks) {
  FlashDeviceArgs p;
  p.num_heads_q = 32;
  p.num_heads_kv = 8;
  EXPECT_EQ(FlashBwdGroupSplit(p), 1);
  p.causal = true;
  EXPECT_EQ(FlashBwdGroupSplit(p), 4);
  p.causal = false;
  p.window_left = 100;
  EXPECT_EQ(FlashBwdGroupSplit(p), 4);
  p.window_left = -1;
  p.window_right = 0;
  EXPECT_EQ(FlashBwdGroupSplit(p), 4);
  p.num_heads_kv = 32;
  EXPECT_EQ(FlashBwdGroupSplit(p), 1);
  p.num_heads_q = 6;
  p.num_heads_kv = 1;
  EXPECT_EQ(FlashBwdGroupSplit(p), 6);
}

}  // namespace
}  // namespace kernelserve::cuda
