// The CPU platform of flash attention: its configs (heuristic, candidates, limits) and runs.
#include "kernels/flash_attention/cpu/flash_attention_cpu.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::CpuDevice;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

TensorSpecMap Varlen() {
  return {{"q", Spec(DType::kF16, {20, 4, 32})},
          {"k", Spec(DType::kF16, {1, 30, 1, 32})},
          {"v", Spec(DType::kF16, {1, 30, 1, 32})},
          {"cu_seqlens_q", Spec(DType::kI32, {3})},
          {"cu_seqlens_k", Spec(DType::kI64, {3})}};
}

// What `run` returns; ends the test binary when it has not returned within `limit` (a run
// cannot be stopped from outside, and a hang would hold ctest until its own timeout).
absl::StatusOr<TensorMap> Within(absl::Duration limit,
                                 const std::function<absl::StatusOr<TensorMap>()>& run) {
  absl::StatusOr<TensorMap> result;
  absl::Notification done;
  std::thread worker([&] {
    result = run();
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(limit)) {
    std::fprintf(stderr, "the run has not returned after %s\n",
                 absl::FormatDuration(limit).c_str());
    std::abort();
  }
  worker.join();
  return result;
}

TEST(FlashAttentionCpuTest, RunRejectsForeignConfigsAndEarlyFetch) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const TensorMap in = {{"q", RandomTensor(DType::kF32, {1, 3, 2, 8}, 70)},
                        {"k", RandomTensor(DType::kF32, {1, 4, 2, 8}, 71)},
                        {"v", RandomTensor(DType::kF32, {1, 4, 2, 8}, 72)}};
  auto problem = AnalyzeCall(*kernel, SpecsOf(in), {});
  ASSERT_TRUE(problem.ok());
  const PlatformImpl& cpu = *kernel->impl(Platform::kCpu);
  absl::StatusOr<std::unique_ptr<PreparedRun>> run = cpu.Prepare(**problem, in, CpuDevice(1));
  ASSERT_TRUE(run.ok());
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig cuda;
  cuda.block_q = 64;
  cuda.platform = "cuda";
  EXPECT_FALSE(cpu.CheckConfig(cuda, **problem, CpuDevice(1)).ok());
  EXPECT_EQ((*run)->Launch(cuda).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlashAttentionCpuTest, CpuHeuristicIsAPureCandidate) {
  FlashAttentionKernel kernel;
  const std::unique_ptr<Kernel> made = MakeFlashAttention();
  const PlatformImpl& cpu = *made->impl(Platform::kCpu);
  const std::vector<TensorSpecMap> shapes = {{{"q", Spec(DType::kF32, {1, 1, 1, 8})},
                                              {"k", Spec(DType::kF32, {1, 1, 1, 8})},
                                              {"v", Spec(DType::kF32, {1, 1, 1, 8})}},
                                             {{"q", Spec(DType::kBF16, {4, 2048, 32, 128})},
                                              {"k", Spec(DType::kBF16, {4, 2048, 8, 128})},
                                              {"v", Spec(DType::kBF16, {4, 2048, 8, 128})}},
                                             {{"q", Spec(DType::kF16, {8, 1, 16, 64})},
                                              {"k", Spec(DType::kF16, {8, 4096, 1, 64})},
                                              {"v", Spec(DType::kF16, {8, 4096, 1, 64})}},
                                             Varlen()};
  for (const TensorSpecMap& inputs : shapes) {
    auto problem = AnalyzeCall(kernel, inputs, {});
    ASSERT_TRUE(problem.ok()) << problem.status();
    for (int threads : {1, 2, 32}) {
      const KernelConfig heuristic = cpu.Heuristic(**problem, CpuDevice(threads));
      SCOPED_TRACE(heuristic.DebugString());
      EXPECT_EQ(heuristic, cpu.Heuristic(**problem, CpuDevice(threads)));
      EXPECT_EQ(heuristic.platform, "cpu");
      EXPECT_TRUE(cpu.IsCandidate(heuristic, **problem, CpuDevice(threads)));
      const std::vector<KernelConfig> candidates = cpu.Candidates(**problem, CpuDevice(threads));
      std::set<std::string> distinct;
      for (const KernelConfig& c : candidates) {
        EXPECT_EQ(c.platform, "cpu");
        EXPECT_GT(c.block_q, 0);
        EXPECT_GT(c.block_k, 0);
        EXPECT_GE(c.Named("threads"), 1);
        EXPECT_TRUE(cpu.CheckConfig(c, **problem, CpuDevice(threads)).ok());
        distinct.insert(c.ToJson());
      }
      EXPECT_EQ(distinct.size(), candidates.size());
    }
  }
  auto heuristic = [&](const TensorSpecMap& inputs) {
    return cpu.Heuristic(**AnalyzeCall(kernel, inputs, {}), CpuDevice(32));
  };
  EXPECT_EQ(heuristic(shapes[0]).Named("threads"), 1);
  EXPECT_EQ(heuristic(shapes[1]).Named("threads"), 32);
  EXPECT_EQ(heuristic(shapes[2]).block_q, 16);
}

// Empty inputs declare dims that no bytes back; the run neither walks nor sizes anything from
// them. q [2^40,0,1,8] once had every one of its 2^40 sequences looped over (minutes for 10^9),
// and a bias [0,1,2^40,2^40] had its Sq * Sk computed past int64 (UBSan stops there).
TEST(FlashAttentionCpuTest, EmptyInputsWithHugeDimsRunWithoutWalkingThem) {
  const std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  constexpr int64_t kHuge = int64_t{1} << 40;
  const Shape no_rows = {kHuge, 0, 1, 8};
  const Shape no_batch = {0, kHuge, 1, 8};
  const std::vector<TensorMap> cases = {
      {{"q", Tensor::Zeros(DType::kF32, no_rows)},
       {"k", Tensor::Zeros(DType::kF32, no_rows)},
       {"v", Tensor::Zeros(DType::kF32, no_rows)}},
      {{"q", Tensor::Zeros(DType::kF32, no_batch)},
       {"k", Tensor::Zeros(DType::kF32, no_batch)},
       {"v", Tensor::Zeros(DType::kF32, no_batch)},
       {"bias", Tensor::Zeros(DType::kF32, {0, 1, kHuge, kHuge})}}};
  for (const TensorMap& inputs : cases) {
    SCOPED_TRACE(ShapeString(inputs.at("q").shape()));
    absl::StatusOr<TensorMap> out = Within(absl::Seconds(60), [&] {
      return ::kernelserve::testing::RunOnCpu(*kernel, inputs, {{"return_lse", true}},
                                              KernelConfig{});
    });
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->at("out").shape(), inputs.at("q").shape());
    EXPECT_EQ(out->at("lse").numel(), 0);
  }
}

}  // namespace
}  // namespace kernelserve
