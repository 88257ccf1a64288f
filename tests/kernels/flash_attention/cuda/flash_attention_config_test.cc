// Config choice and dispatch of the CUDA flash attention kernel, and what it reports as
// unsupported. None of these needs a GPU: they run in CI.
#include "kernels/flash_attention/cuda/flash_attention_config.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"
#include "kernels/flash_attention/cuda/flash_attention_dispatch.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve::cuda {
namespace {

using ::testing::HasSubstr;

DeviceInfo Gpu(int sm_count, int64_t shared_optin) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  device.fingerprint.kind = "gpu";
  device.fingerprint.sm_count = sm_count;
  device.shared_memory_per_block_optin = shared_optin;
  return device;
}

// An H100-like device: compute capability 9.0, 132 SMs, 227 KiB of shared memory per block.
DeviceInfo Hopper() {
  DeviceInfo device = Gpu(132, 227 * 1024);
  device.fingerprint.cc_major = 9;
  device.fingerprint.cc_minor = 0;
  return device;
}

bool IsWgmma(const KernelConfig& config) { return config.algorithm == kFlashWgmmaAlgorithm; }
bool IsWarpSpecialized(const KernelConfig& config) {
  return config.algorithm == kFlashWsAlgorithm || config.algorithm == kFlashWsPingPongAlgorithm;
}
// Any of the Hopper-only kernels.
bool IsHopperOnly(const KernelConfig& config) { return !config.algorithm.empty(); }

FlashAttentionProblem MakeProblem(DType dtype, int64_t b, int64_t s, int64_t hq, int64_t d) {
  FlashAttentionProblem p;
  p.dtype = dtype;
  p.num_sequences = b;
  p.seq_len_q = s;
  p.seq_len_k = s;
  p.total_q = b * s;
  p.total_k = b * s;
  p.num_heads_q = hq;
  p.num_heads_kv = hq;
  p.head_dim = d;
  return p;
}

std::vector<FlashAttentionProblem> Problems() {
  std::vector<FlashAttentionProblem> out;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t d : {32, 64, 96, 128, 256}) {
      for (int64_t b : {1, 2, 16}) {
        for (int64_t s : {1, 7, 129, 1000, 8192}) {
          for (int64_t hq : {1, 8, 32}) out.push_back(MakeProblem(dtype, b, s, hq, d));
        }
      }
    }
  }
  return out;
}

TEST(FlashAttentionConfigTest, EveryCompiledConfigHasALauncher) {
  for (int64_t d : {32, 64, 96, 128, 256}) {
    const std::vector<KernelConfig> configs = FlashAttentionCompiledConfigs(d);
    ASSERT_FALSE(configs.empty()) << "head dim " << d;
    std::set<std::string> seen;
    for (const KernelConfig& config : configs) {
      EXPECT_TRUE(IsFlashConfigCompiled(config, d)) << config.DebugString();
      // 16 query rows a compute warp; the warp-specialized kernel adds a producer warpgroup.
      const int compute_warps = config.num_warps - (IsWarpSpecialized(config) ? 4 : 0);
      EXPECT_EQ(config.block_q, 16 * compute_warps) << config.DebugString();
      if (IsHopperOnly(config)) {
        EXPECT_EQ(config.num_warps % 4, 0) << config.DebugString();
      }
      EXPECT_TRUE(seen.insert(config.ToJson()).second) << "duplicate " << config.DebugString();
      for (DType dtype : {DType::kF16, DType::kBF16}) {
        EXPECT_TRUE(SelectFlashLaunch(dtype, d, config).ok()) << d << " " << config.DebugString();
      }
    }
  }
}

TEST(FlashAttentionConfigTest, DispatchRejectsWhatIsNotCompiled) {
  const KernelConfig config = FlashAttentionCompiledConfigs(128).front();
  EXPECT_EQ(SelectFlashLaunch(DType::kF32, 128, config).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(SelectFlashLaunch(DType::kBF16, 80, config).status().code(),
            absl::StatusCode::kUnimplemented);
  KernelConfig odd = config;
  odd.block_k = 48;
  const absl::Status status = SelectFlashLaunch(DType::kBF16, 128, odd).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("block_k 48"));
  EXPECT_TRUE(FlashAttentionCompiledConfigs(80).empty());
  EXPECT_FALSE(IsFlashConfigCompiled(odd, 128));
}

TEST(FlashAttentionConfigTest, HeuristicIsACompiledCandidateThatFits) {
  for (const DeviceInfo& device : {Gpu(132, 227 * 1024), Gpu(0, 0), Gpu(8, 100 * 1024), Hopper()}) {
    for (const FlashAttentionProblem& p : Problems()) {
      const KernelConfig best = FlashAttentionHeuristic(p, device);
      EXPECT_EQ(best.platform, "cuda");
      EXPECT_TRUE(IsFlashConfigCompiled(best, p.head_dim)) << best.DebugString();
      EXPECT_TRUE(FlashConfigFits(best, p.head_dim, device)) << best.DebugString();
      const std::vector<KernelConfig> candidates = FlashAttentionCandidates(p, device);
      ASSERT_FALSE(candidates.empty());
      EXPECT_EQ(candidates.front(), best);
      for (const KernelConfig& c : candidates) {
        EXPECT_TRUE(FlashConfigFits(c, p.head_dim, device)) << c.DebugString();
        EXPECT_EQ(std::count(candidates.begin(), candidates.end(), c), 1) << c.DebugString();
      }
    }
  }
}

TEST(FlashAttentionConfigTest, HeuristicOffHopperPicksTheMeasuredMmaShape) {
  const DeviceInfo h100 = Gpu(132, 227 * 1024);  // capability unknown: no wgmma
  const KernelConfig d128 =
      FlashAttentionHeuristic(MakeProblem(DType::kBF16, 4, 4096, 16, 128), h100);
  EXPECT_EQ(d128.block_q, 64);
  EXPECT_EQ(d128.block_k, 64);
  EXPECT_EQ(d128.num_warps, 4);
  EXPECT_EQ(d128.num_stages, 2);
  EXPECT_EQ(FlashAttentionHeuristic(MakeProblem(DType::kBF16, 4, 4096, 16, 64), h100).block_k, 128);
  EXPECT_FALSE(IsWgmma(d128));
}

TEST(FlashAttentionConfigTest, WgmmaConfigsRunOnHopperOnly) {
  const FlashAttentionProblem p = MakeProblem(DType::kBF16, 4, 4096, 16, 128);
  for (const KernelConfig& c : FlashAttentionCandidates(p, Gpu(132, 227 * 1024))) {
    EXPECT_FALSE(IsHopperOnly(c)) << c.DebugString();
  }
  const KernelConfig best = FlashAttentionHeuristic(p, Hopper());
#if defined(KERNELSERVE_FLASH_WGMMA)
  // The build targets sm_90a: dense D = 128 on Hopper takes the warp-specialized kernel
  // without turns; the wgmma kernel, the one with turns and mma.sync stay candidates.
  EXPECT_EQ(best.algorithm, kFlashWsAlgorithm) << best.DebugString();
  EXPECT_EQ(best.block_q, 128);
  EXPECT_EQ(best.block_k, 128);
  EXPECT_EQ(best.num_warps, 12);
  EXPECT_EQ(best.num_stages, 2);
  const std::vector<KernelConfig> candidates = FlashAttentionCandidates(p, Hopper());
  for (std::string_view algorithm :
       {std::string_view(), kFlashWgmmaAlgorithm, kFlashWsPingPongAlgorithm}) {
    EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(),
                            [&](const KernelConfig& c) { return c.algorithm == algorithm; }))
        << "no candidate of algorithm '" << algorithm << "'";
  }
  EXPECT_FALSE(FlashConfigFits(best, 128, Gpu(132, 227 * 1024)));
  // Head dim 96 (rows padded to 128 in shared memory: as much as D = 128) takes the same
  // config; D = 64, varlen and a bias the same shape with turns (ping-pong); no such kernel at
  // D = 32: mma.sync.
  const KernelConfig d96_best =
      FlashAttentionHeuristic(MakeProblem(DType::kBF16, 2, 512, 8, 96), Hopper());
  EXPECT_EQ(d96_best, best) << d96_best.DebugString();
  FlashAttentionProblem varlen = p;
  varlen.varlen = true;
  FlashAttentionProblem bias = p;
  bias.has_bias = true;
  for (const FlashAttentionProblem& turns :
       {MakeProblem(DType::kBF16, 2, 512, 8, 64), varlen, bias}) {
    KernelConfig c = FlashAttentionHeuristic(turns, Hopper());
    EXPECT_EQ(c.algorithm, kFlashWsPingPongAlgorithm) << c.DebugString();
    c.algorithm = best.algorithm;
    EXPECT_EQ(c, best) << c.DebugString();
  }
  const KernelConfig d96 =
      FlashAttentionHeuristic(MakeProblem(DType::kBF16, 2, 512, 8, 96), Hopper());
  EXPECT_EQ(FlashConfigSharedBytes(d96, 96), FlashConfigSharedBytes(best, 128));
  EXPECT_FALSE(
      IsHopperOnly(FlashAttentionHeuristic(MakeProblem(DType::kBF16, 2, 512, 8, 32), Hopper())));
  // D = 256: key tiles of 64 (Q 64 KiB, two stages of K and V 128 KiB); a Hopper part with
  // less shared memory takes the wgmma kernel's one warpgroup (225 KiB) or mma.sync.
  const FlashAttentionProblem p256 = MakeProblem(DType::kBF16, 8, 2048, 16, 256);
  const KernelConfig d256 = FlashAttentionHeuristic(p256, Hopper());
  EXPECT_EQ(d256.algorithm, kFlashWsAlgorithm) << d256.DebugString();
  EXPECT_EQ(d256.block_k, 64);
  // Tiles, 1024 bytes of alignment slack, ten mbarriers, the item slot and the two consumers'
  // bias mbarriers (two each).
  EXPECT_EQ(FlashConfigSharedBytes(d256, 256), 192 * 1024 + 1024 + 8 * 10 + 8 + 8 * 4);
  DeviceInfo small_hopper = Hopper();
  small_hopper.shared_memory_per_block_optin = 180 * 1024;
  const KernelConfig d256_small = FlashAttentionHeuristic(p256, small_hopper);
  EXPECT_FALSE(IsHopperOnly(d256_small)) << d256_small.DebugString();
  EXPECT_TRUE(FlashConfigFits(d256_small, 256, small_hopper)) << d256_small.DebugString();
#else
  EXPECT_FALSE(IsHopperOnly(best)) << best.DebugString();
#endif
}

TEST(FlashAttentionConfigTest, DispatchTellsTheAlgorithmsApart) {
  KernelConfig config = FlashAttentionCompiledConfigs(128).front();
  config.algorithm = "tma";
  const absl::Status status = SelectFlashLaunch(DType::kBF16, 128, config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("algorithm 'tma'"));
  EXPECT_FALSE(IsFlashConfigCompiled(config, 128));
}

TEST(FlashAttentionConfigTest, HeuristicShrinksToTheDevicesSharedMemory) {
  // 64 x 64 tiles at D = 128 need 80 KiB; with 64 KiB the largest fitting config is taken.
  const DeviceInfo small = Gpu(132, 64 * 1024);
  const FlashAttentionProblem p = MakeProblem(DType::kBF16, 4, 4096, 16, 128);
  const KernelConfig best = FlashAttentionHeuristic(p, small);
  EXPECT_TRUE(FlashConfigFits(best, 128, small)) << best.DebugString();
  for (const KernelConfig& c : FlashAttentionCompiledConfigs(128)) {
    if (FlashConfigFits(c, 128, small)) {
      EXPECT_LE(FlashConfigSharedBytes(c, 128), FlashConfigSharedBytes(best, 128));
    }
  }
}

TEST(FlashAttentionConfigTest, CandidatesThatDoNotFitSharedMemoryAreLeftOut) {
  // 128 x 64 tiles at D = 128 need 96 KiB; a device with 80 KiB keeps only smaller ones.
  const DeviceInfo small = Gpu(132, 80 * 1024);
  const FlashAttentionProblem p = MakeProblem(DType::kBF16, 4, 4096, 16, 128);
  for (const KernelConfig& c : FlashAttentionCandidates(p, small)) {
    EXPECT_LE(FlashConfigSharedBytes(c, 128), 80 * 1024) << c.DebugString();
  }
  EXPECT_LT(FlashAttentionCandidates(p, small).size(),
            FlashAttentionCandidates(p, Gpu(132, 227 * 1024)).size());
}

TEST(FlashAttentionConfigTest, CudaPlatformOffersTheCudaSpace) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const PlatformImpl& cuda = *kernel->impl(Platform::kCuda);
  const TensorSpecMap specs = {{"q", {DType::kBF16, {2, 256, 8, 128}}},
                               {"k", {DType::kBF16, {2, 256, 2, 128}}},
                               {"v", {DType::kBF16, {2, 256, 2, 128}}}};
  auto problem = kernel->Analyze(specs, {});
  ASSERT_TRUE(problem.ok());
  const DeviceInfo gpu = Gpu(132, 227 * 1024);
  const KernelConfig best = cuda.Heuristic(**problem, gpu);
  const std::vector<KernelConfig> candidates = cuda.Candidates(**problem, gpu);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front(), best);
  EXPECT_TRUE(IsFlashConfigCompiled(best, 128));
  EXPECT_TRUE(cuda.CheckConfig(best, **problem, gpu).ok());
  // A config outside the schema's range names the field and the range (the schema's check);
  // one in range but not compiled names the values it may take.
  KernelConfig huge = best;
  huge.block_q = 2147483647;
  EXPECT_THAT(cuda.CheckConfig(huge, **problem, gpu).message(),
              HasSubstr("config block_q=2147483647 is out of range for flash attention on cuda"));
  KernelConfig odd = best;
  odd.block_q = 65;
  EXPECT_THAT(cuda.CheckConfig(odd, **problem, gpu).message(),
              HasSubstr("block_q=65: expected one of"));
}

// The cuda platform is the own kernels alone: no cuDNN plan among its candidates, a cuDNN
// config refused; the GPU "auto" (where cuDNN loads) spans both.
TEST(FlashAttentionConfigTest, CudaPlatformIsTheOwnKernelsAlone) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const PlatformImpl& cuda = *kernel->impl(Platform::kCuda);
  const TensorSpecMap specs = {{"q", {DType::kBF16, {2, 256, 8, 128}}},
                               {"k", {DType::kBF16, {2, 256, 8, 128}}},
                               {"v", {DType::kBF16, {2, 256, 8, 128}}}};
  auto problem = kernel->Analyze(specs, {{"causal", true}});
  ASSERT_TRUE(problem.ok());
  const DeviceInfo gpu = Gpu(132, 227 * 1024);
  for (const KernelConfig& c : cuda.Candidates(**problem, gpu)) {
    EXPECT_EQ(c.platform, "cuda") << c.DebugString();
  }
  EXPECT_FALSE(cuda.RunsConfigsOf("cudnn"));
  EXPECT_EQ(cuda.CheckConfig(cudnn::CudnnFlashConfig(0), **problem, gpu).code(),
            absl::StatusCode::kInvalidArgument);
  if (const PlatformImpl* automatic = kernel->gpu_auto_impl()) {
    EXPECT_TRUE(automatic->RunsConfigsOf("cudnn"));
    EXPECT_TRUE(automatic->RunsConfigsOf("cuda"));
  }
}

TEST(FlashAttentionConfigTest, UnsupportedProblemsAreUnimplemented) {
  EXPECT_TRUE(CheckFlashProblemSupported(MakeProblem(DType::kBF16, 1, 7, 2, 64)).ok());
  EXPECT_TRUE(CheckFlashProblemSupported(MakeProblem(DType::kF16, 1, 7, 2, 128)).ok());
  const absl::Status f32 = CheckFlashProblemSupported(MakeProblem(DType::kF32, 1, 7, 2, 64));
  EXPECT_EQ(f32.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f32.message(), HasSubstr("f32"));
  const absl::Status other = CheckFlashProblemSupported(MakeProblem(DType::kBF16, 1, 7, 2, 80));
  EXPECT_EQ(other.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(other.message(), HasSubstr("head dim 80"));
}

TEST(FlashAttentionConfigTest, CudaPlatformRefusesUnsupportedProblems) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const PlatformImpl& cuda = *kernel->impl(Platform::kCuda);
  const DeviceInfo gpu = Gpu(132, 227 * 1024);
  // Key tiles of 128 rows are compiled at D = 64 only.
  KernelConfig config = FlashAttentionCompiledConfigs(64).front();
  config.block_k = 128;
  ASSERT_TRUE(IsFlashConfigCompiled(config, 64));
  auto problem = [&](DType dtype, int64_t d) {
    const TensorSpecMap specs = {{"q", {dtype, {1, 16, 2, d}}},
                                 {"k", {dtype, {1, 16, 2, d}}},
                                 {"v", {dtype, {1, 16, 2, d}}}};
    return *kernel->Analyze(specs, {});
  };
  EXPECT_TRUE(cuda.Supports(*problem(DType::kBF16, 64), gpu).ok());
  EXPECT_TRUE(cuda.CheckConfig(config, *problem(DType::kBF16, 64), gpu).ok());
  EXPECT_EQ(cuda.Supports(*problem(DType::kF32, 64), gpu).code(), absl::StatusCode::kUnimplemented);
  // Not a multiple of 8: neither the own kernel nor cuDNN (where it is loaded) runs it.
  EXPECT_EQ(cuda.Supports(*problem(DType::kBF16, 36), gpu).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(cuda.CheckConfig(config, *problem(DType::kBF16, 128), gpu).ok());
  DeviceInfo cpu = gpu;
  cpu.platform = Platform::kCpu;
  EXPECT_FALSE(cuda.Supports(*problem(DType::kBF16, 64), cpu).ok());
}

}  // namespace
}  // namespace kernelserve::cuda
