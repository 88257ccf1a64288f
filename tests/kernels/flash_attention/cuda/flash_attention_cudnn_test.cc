// The cudnn platform of flash attention on a GPU against the CPU reference, on fresh random
// inputs with outputs poisoned before each launch: every option combination the platform
// accepts, with every plan; what it refuses is Unimplemented there and still served by the cuda
// platform. Also: the same bits twice, concurrent calls on one device, a graph-cache eviction
// between two launches of one run. Skips without a GPU; without cuDNN it skips too, unless
// KERNELSERVE_EXPECT_CUDNN=1 (the device runs set it), where it fails.
#ifdef KERNELSERVE_WITH_CUDNN
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/support/testing.h"

namespace kernelserve::cudnn {
namespace {

double Tolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2 : 5e-3; }

TensorMap Qkv(DType dtype, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
              uint64_t seed) {
  return {{"q", RandomTensor(dtype, {b, sq, hq, d}, seed, -2.0f, 2.0f)},
          {"k", RandomTensor(dtype, {b, sk, hkv, d}, seed + 1, -1.0f, 1.0f)},
          {"v", RandomTensor(dtype, {b, sk, hkv, d}, seed + 2, -1.0f, 1.0f)}};
}

class FlashAttentionCudnnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) GTEST_SKIP() << "no CUDA device visible";
    kernel_ = MakeFlashAttention();
    if (kernel_->impl(Platform::kCudnn) == nullptr) {
      const char* expect = std::getenv("KERNELSERVE_EXPECT_CUDNN");
      if (expect != nullptr && std::strcmp(expect, "1") == 0) {
        FAIL() << "KERNELSERVE_EXPECT_CUDNN=1 but the cudnn platform is absent (cuDNN not loaded)";
      }
      GTEST_SKIP() << "cuDNN is not loadable here: no cudnn platform";
    }
  }

  const DeviceInfo& gpu() const { return devices_.front(); }
  const PlatformImpl& cudnn() const { return *kernel_->impl(Platform::kCudnn); }
  const PlatformImpl& cuda() const { return *kernel_->impl(Platform::kCuda); }

  std::shared_ptr<const Problem> Analyze(const TensorMap& inputs, const Attributes& params) const {
    const Attributes attrs = *kernel_->schema().CanonicalParams(params);
    absl::StatusOr<std::shared_ptr<const Problem>> problem =
        kernel_->Analyze(SpecsOf(inputs), attrs);
    EXPECT_TRUE(problem.ok()) << problem.status();
    return problem.ok() ? *problem : nullptr;
  }

  TensorMap Reference(const TensorMap& inputs, const Attributes& params) const {
    const std::shared_ptr<const Problem> problem = Analyze(inputs, params);
    const DeviceInfo cpu = CpuDeviceInfo();
    const PlatformImpl& impl = *kernel_->impl(Platform::kCpu);
    std::unique_ptr<PreparedRun> run = *impl.Prepare(*problem, inputs, cpu);
    EXPECT_TRUE(run->Launch(impl.Heuristic(*problem, cpu)).ok());
    return *run->Fetch();
  }

  // Launches `config` on `run` with poisoned outputs and compares with `want`.
  void ExpectMatches(PreparedRun& run, const KernelConfig& config, const TensorMap& want,
                     DType dtype, const std::string& where) const {
    ASSERT_TRUE(cuda::PoisonOutputs(run).ok()) << where;
    absl::StatusOr<double> seconds = run.Launch(config);
    ASSERT_TRUE(seconds.ok()) << where << ": " << seconds.status();
    absl::StatusOr<TensorMap> got = run.Fetch();
    ASSERT_TRUE(got.ok()) << where << ": " << got.status();
    EXPECT_LT(RelativeError(got->at("out"), want.at("out")), Tolerance(dtype)) << where;
    if (want.contains("lse")) {
      ASSERT_TRUE(got->contains("lse")) << where;
      EXPECT_EQ(LseMismatch(got->at("lse"), want.at("lse")), "") << where;
    }
  }

  // Every plan of the cudnn platform when it accepts the call (returns true), else checks it
  // refuses with Unimplemented and that the cuda platform serves the call where it runs it.
  bool Check(const TensorMap& inputs, const Attributes& params, const std::string& label) const {
    const std::shared_ptr<const Problem> problem = Analyze(inputs, params);
    if (problem == nullptr) return false;
    const absl::Status supported = cudnn().Supports(*problem, gpu());
    const TensorMap want = Reference(inputs, params);
    const DType dtype = inputs.at("q").dtype();
    if (!supported.ok()) {
      EXPECT_EQ(supported.code(), absl::StatusCode::kUnimplemented) << label << ": " << supported;
      std::printf("  cudnn refuses %s: %s\n", label.c_str(),
                  std::string(supported.message()).c_str());
      if (cuda().Supports(*problem, gpu()).ok()) {
        const KernelConfig config = cuda().Heuristic(*problem, gpu());
        EXPECT_FALSE(IsCudnnConfig(config)) << label;
        std::unique_ptr<PreparedRun> run = *cuda().Prepare(*problem, inputs, gpu());
        ExpectMatches(*run, config, want, dtype, label + " (cuda)");
      }
      return false;
    }
    const std::vector<KernelConfig> plans = cudnn().Candidates(*problem, gpu());
    EXPECT_FALSE(plans.empty()) << label;
    EXPECT_EQ(plans.front(), cudnn().Heuristic(*problem, gpu())) << label;
    absl::StatusOr<std::unique_ptr<PreparedRun>> run = cudnn().Prepare(*problem, inputs, gpu());
    EXPECT_TRUE(run.ok()) << label << ": " << run.status();
    if (!run.ok()) return false;
    for (const KernelConfig& plan : plans) {
      EXPECT_TRUE(cudnn().CheckConfig(plan, *problem, gpu()).ok()) << label;
      ExpectMatches(**run, plan, want, dtype, absl::StrCat(label, " ", plan.DebugString()));
    }
    std::printf("  cudnn runs    %s (%zu plans)\n", label.c_str(), plans.size());
    return true;
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

TEST_F(FlashAttentionCudnnTest, EveryOptionItAcceptsMatchesAndTheRestIsRefused) {
  struct Options {
    const char* name;
    Attributes params;
  };
  const std::vector<Options> options = {
      {"plain", {}},
      {"causal", {{"causal", true}}},
      {"lse", {{"return_lse", true}}},
      {"causal+lse", {{"causal", true}, {"return_lse", true}}},
      {"scale", {{"softmax_scale", 0.3}}},
      {"window 32/8", {{"window_left", int64_t{32}}, {"window_right", int64_t{8}}}},
      {"window left 40", {{"window_left", int64_t{40}}}},
      {"causal+window 24", {{"causal", true}, {"window_left", int64_t{24}}, {"return_lse", true}}},
      {"soft cap", {{"logits_soft_cap", 20.0}}},
  };
  int accepted = 0;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t d : {64, 128}) {
      for (const Options& o : options) {
        // Sq < Sk with odd lengths, GQA 8:2.
        const TensorMap inputs = Qkv(dtype, 2, 77, 203, 8, 2, d, 100 + d);
        accepted += Check(inputs, o.params,
                          absl::StrCat(Sv(DTypeName(dtype)), " D=", d, " [2,77,203] 8:2 ", o.name));
      }
    }
  }
  for (int64_t d : {32, 80, 96, 256}) {
    for (bool causal : {false, true}) {
      const TensorMap inputs = Qkv(DType::kBF16, 1, 300, 300, 4, 4, d, 200 + d);
      accepted += Check(inputs, {{"causal", causal}, {"return_lse", true}},
                        absl::StrCat("bf16 D=", d, " [1,300,300] 4:4 causal=", causal));
    }
  }
  // Queries past the keys: rows that see no key under causal (zeros, lse -inf).
  accepted += Check(Qkv(DType::kF16, 1, 96, 40, 2, 1, 64, 300),
                    {{"causal", true}, {"return_lse", true}}, "f16 D=64 [1,96,40] causal Sq>Sk");
  // cuDNN runs plain, causal and lse calls at every listed head dim; a refusal of all would
  // make this test pass for nothing.
  EXPECT_GE(accepted, 20);
}

TEST_F(FlashAttentionCudnnTest, BiasIsRunOrRefusedNeverWrong) {
  for (const Shape& bias_shape :
       {Shape{2, 8, 77, 203}, Shape{1, 8, 77, 203}, Shape{1, 1, 77, 203}}) {
    TensorMap inputs = Qkv(DType::kBF16, 2, 77, 203, 8, 2, 64, 400);
    inputs["bias"] = RandomTensor(DType::kF32, bias_shape, 401, -2.0f, 2.0f);
    Check(inputs, {}, absl::StrCat("bf16 D=64 bias ", ShapeString(bias_shape)));
  }
}

// A head dim only cuDNN has: the cuda platform (the own kernels) refuses it, the GPU "auto"
// serves it with cuDNN's plan.
TEST_F(FlashAttentionCudnnTest, AutoServesHeadDimsOnlyCudnnHasAndCudaRefusesThem) {
  const TensorMap inputs = Qkv(DType::kF16, 2, 130, 130, 4, 2, 80, 500);
  const std::shared_ptr<const Problem> problem = Analyze(inputs, {{"causal", true}});
  EXPECT_EQ(cuda().Supports(*problem, gpu()).code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(cuda().RunsConfigsOf(kCudnnPlatform));
  ASSERT_NE(kernel_->gpu_auto_impl(), nullptr);
  const PlatformImpl& automatic = *kernel_->gpu_auto_impl();
  ASSERT_TRUE(automatic.Supports(*problem, gpu()).ok());
  EXPECT_TRUE(automatic.RunsConfigsOf(kCudnnPlatform));
  const KernelConfig config = automatic.Heuristic(*problem, gpu());
  EXPECT_TRUE(IsCudnnConfig(config)) << config.DebugString();
  std::unique_ptr<PreparedRun> run = *automatic.Prepare(*problem, inputs, gpu());
  ExpectMatches(*run, config, Reference(inputs, {{"causal", true}}), DType::kF16, "D=80 via auto");
}

TEST_F(FlashAttentionCudnnTest, SameInputTwiceGivesTheSameBits) {
  const TensorMap inputs = Qkv(DType::kBF16, 2, 256, 256, 8, 8, 128, 600);
  const std::shared_ptr<const Problem> problem = Analyze(inputs, {{"causal", true}});
  std::unique_ptr<PreparedRun> run = *cudnn().Prepare(*problem, inputs, gpu());
  const KernelConfig plan = cudnn().Heuristic(*problem, gpu());
  ASSERT_TRUE(run->Launch(plan).ok());
  const TensorMap first = *run->Fetch();
  ASSERT_TRUE(cuda::PoisonOutputs(*run).ok());
  ASSERT_TRUE(run->Launch(plan).ok());
  const TensorMap second = *run->Fetch();
  const Tensor& a = first.at("out");
  const Tensor& b = second.at("out");
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

TEST_F(FlashAttentionCudnnTest, ConcurrentCallsOnOneDeviceMatch) {
  const TensorMap inputs = Qkv(DType::kF16, 2, 200, 330, 8, 4, 128, 700);
  const Attributes params = {{"return_lse", true}};
  const TensorMap want = Reference(inputs, params);
  const std::shared_ptr<const Problem> problem = Analyze(inputs, params);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<PreparedRun> run = *cudnn().Prepare(*problem, inputs, gpu());
      for (int i = 0; i < 5; ++i) {
        ExpectMatches(*run, cudnn().Heuristic(*problem, gpu()), want, DType::kF16,
                      absl::StrCat("thread ", t, " call ", i));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST_F(FlashAttentionCudnnTest, GraphEvictedBetweenLaunchesIsRebuilt) {
  const TensorMap a = Qkv(DType::kBF16, 1, 128, 128, 4, 4, 64, 800);
  const TensorMap b = Qkv(DType::kBF16, 1, 192, 192, 4, 4, 64, 810);
  const std::shared_ptr<const Problem> pa = Analyze(a, {});
  const std::shared_ptr<const Problem> pb = Analyze(b, {});
  std::unique_ptr<PreparedRun> run_a = *cudnn().Prepare(*pa, a, gpu());
  ExpectMatches(*run_a, CudnnFlashConfig(0), Reference(a, {}), DType::kBF16, "a first");
  SetFlashGraphCacheCapacity(1);
  const FlashGraphCacheStats before = GetFlashGraphCacheStats();
  std::unique_ptr<PreparedRun> run_b = *cudnn().Prepare(*pb, b, gpu());  // evicts a's graph
  ExpectMatches(*run_b, CudnnFlashConfig(0), Reference(b, {}), DType::kBF16, "b");
  ExpectMatches(*run_a, CudnnFlashConfig(0), Reference(a, {}), DType::kBF16, "a after eviction");
  const FlashGraphCacheStats after = GetFlashGraphCacheStats();
  SetFlashGraphCacheCapacity(256);
  EXPECT_GT(after.evictions, before.evictions);
  EXPECT_GT(after.builds, before.builds);
  EXPECT_LE(after.entries, 1);
}

TEST_F(FlashAttentionCudnnTest, PlanPastTheGraphsPlansIsInvalidArgument) {
  const TensorMap inputs = Qkv(DType::kBF16, 1, 64, 64, 2, 2, 64, 900);
  const std::shared_ptr<const Problem> problem = Analyze(inputs, {});
  const KernelConfig past = CudnnFlashConfig(kMaxFlashPlans);
  EXPECT_EQ(cudnn().CheckConfig(past, *problem, gpu()).code(), absl::StatusCode::kInvalidArgument);
  std::unique_ptr<PreparedRun> run = *cudnn().Prepare(*problem, inputs, gpu());
  EXPECT_EQ(run->Launch(past).status().code(), absl::StatusCode::kInvalidArgument);
  KernelConfig own;
  own.block_q = 64;
  EXPECT_EQ(cudnn().CheckConfig(own, *problem, gpu()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve::cudnn
#endif  // KERNELSERVE_WITH_CUDNN
