// The CPU platform of mean pooling: its configs (heuristic, candidates, limits) and runs.
#include "kernels/mean_pooling/cpu/mean_pooling_cpu.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::CpuDevice;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

const PlatformImpl& Cpu(const Kernel& kernel) { return *kernel.impl(Platform::kCpu); }

absl::StatusOr<Tensor> RunCpu(const Kernel& kernel, const TensorMap& inputs,
                              const Attributes& attrs, const KernelConfig& config) {
  absl::StatusOr<TensorMap> outputs =
      ::kernelserve::testing::RunOnCpu(kernel, inputs, attrs, config);
  if (!outputs.ok()) return outputs.status();
  return outputs->at("out");
}

TEST(MeanPoolingCpuTest, ChunkSizeAttributeAndConfigsKeepTheBits) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  const Tensor x = RandomTensor(DType::kF32, {2, 300, 33}, 40);
  absl::StatusOr<Tensor> baseline = RunCpu(*kernel, {{"x", x}}, {}, KernelConfig{});
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  for (int64_t chunk : {1, 5, 64, 1000}) {
    const Attributes attrs = {{"chunk_size", chunk}};
    auto problem = AnalyzeCall(*kernel, SpecsOf({{"x", x}}), attrs);
    ASSERT_TRUE(problem.ok());
    for (const KernelConfig& config : Cpu(*kernel).Candidates(**problem, CpuDevice(4))) {
      SCOPED_TRACE(config.DebugString());
      absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, attrs, config);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->bytes(), baseline->bytes());
    }
    absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, attrs, KernelConfig{});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->bytes(), baseline->bytes());
  }
}

TEST(MeanPoolingCpuTest, RunRejectsForeignConfigsAndEarlyFetch) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  const TensorMap inputs = {{"x", RandomTensor(DType::kF32, {2, 3, 4}, 5)}};
  const PlatformImpl& impl = Cpu(*kernel);
  auto problem = AnalyzeCall(*kernel, SpecsOf(inputs), {});
  ASSERT_TRUE(problem.ok());
  absl::StatusOr<std::unique_ptr<PreparedRun>> run = impl.Prepare(**problem, inputs, CpuDevice(2));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig cuda;
  cuda.platform = "cuda";
  EXPECT_FALSE(impl.Supports(**problem, CpuDevice(2)).ok() &&
               impl.CheckConfig(cuda, **problem, CpuDevice(2)).ok());
  EXPECT_EQ((*run)->Launch(cuda).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MeanPoolingCpuTest, CpuHeuristicIsAPureCandidate) {
  MeanPoolingKernel kernel;
  const std::unique_ptr<Kernel> made = MakeMeanPooling();
  const PlatformImpl& cpu = *made->impl(Platform::kCpu);
  const std::vector<TensorSpecMap> shapes = {
      {{"x", Spec(DType::kF32, {1, 1, 1})}},
      {{"x", Spec(DType::kBF16, {64, 512, 1024})}},
      {{"x", Spec(DType::kF16, {100000, 64})}, {"cu_seqlens", Spec(DType::kI32, {11})}},
      {{"x", Spec(DType::kF32, {8, 4096, 256})}, {"mask", Spec(DType::kBool, {8, 4096})}}};
  for (const TensorSpecMap& inputs : shapes) {
    for (int threads : {1, 2, 16}) {
      for (int64_t chunk : {1, 32, 777}) {
        const Attributes attrs = {{"chunk_size", chunk}};
        auto problem = AnalyzeCall(kernel, inputs, attrs);
        ASSERT_TRUE(problem.ok()) << problem.status();
        const KernelConfig heuristic = cpu.Heuristic(**problem, CpuDevice(threads));
        SCOPED_TRACE(heuristic.DebugString());
        EXPECT_EQ(heuristic, cpu.Heuristic(**problem, CpuDevice(threads)));
        EXPECT_EQ(heuristic.platform, "cpu");
        EXPECT_EQ(heuristic.block_size, chunk);
        EXPECT_TRUE(cpu.IsCandidate(heuristic, **problem, CpuDevice(threads)));
        EXPECT_TRUE(cpu.CheckConfig(heuristic, **problem, CpuDevice(threads)).ok());
        const std::vector<KernelConfig> candidates = cpu.Candidates(**problem, CpuDevice(threads));
        std::set<std::string> distinct;
        for (const KernelConfig& c : candidates) {
          EXPECT_EQ(c.platform, "cpu");
          EXPECT_GT(c.block_size, 0);
          EXPECT_GE(c.Named("threads"), 1);
          EXPECT_LE(c.Named("threads"), std::max(threads, 2));
          distinct.insert(c.ToJson());
        }
        EXPECT_EQ(distinct.size(), candidates.size());
      }
    }
  }
  // Small inputs stay on one thread; large ones use every hardware thread.
  EXPECT_EQ(cpu.Heuristic(**AnalyzeCall(kernel, shapes[0], {}), CpuDevice(16)).Named("threads"), 1);
  EXPECT_EQ(cpu.Heuristic(**AnalyzeCall(kernel, shapes[1], {}), CpuDevice(16)).Named("threads"),
            16);
}

// An empty x declares dims that no bytes back (x [0,1,2^40] is 0 bytes): the run sizes
// nothing from them. It once allocated 2^40 floats of scratch and threw std::bad_alloc.
TEST(MeanPoolingCpuTest, EmptyXWithHugeDimsSizesNothingFromThem) {
  const std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  constexpr int64_t kHuge = int64_t{1} << 40;
  absl::StatusOr<Tensor> out =
      RunCpu(*kernel, {{"x", Tensor::Zeros(DType::kF32, {0, 1, kHuge})}}, {}, KernelConfig{});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (Shape{0, kHuge}));
  // H = 0: every output row is empty, whatever rows x has.
  out = RunCpu(*kernel, {{"x", Tensor::Zeros(DType::kBF16, {3, 1 << 20, 0})}}, {}, KernelConfig{});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (Shape{3, 0}));
}

}  // namespace
}  // namespace kernelserve
