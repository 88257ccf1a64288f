// The CUDA mean pooling platform's run-time behaviour: determinism, errors, out of memory,
// threads and timing. Skips where no GPU is visible.
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "tests/kernels/runtime/cuda/cuda_test_util.h"

namespace kernelserve::cuda::testing {
namespace {

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.spec() == b.spec() && a.bytes() == b.bytes();
}

TEST_F(GpuTest, SameInputSameBits) {
  // Sequences of 20000 rows in chunks of 32: each is combined from 625 partial sums.
  const Tensor x = RandomX(DType::kBF16, {2, 20000, 256}, 601);
  Tensor mask = RandomTensor(DType::kBool, {2, 20000}, 602);
  for (const TensorMap& inputs : {TensorMap{{"x", x}}, TensorMap{{"x", x}, {"mask", mask}}}) {
    auto run = Prepare(inputs, gpu());
    ASSERT_TRUE(run.ok()) << run.status();
    for (const KernelConfig& config : {Config(8, 32, 8, 32), Config(4, 1, 4, 64)}) {
      auto first = LaunchPoisoned(**run, config);
      auto second = LaunchPoisoned(**run, config);
      ASSERT_TRUE(first.ok() && second.ok()) << first.status() << second.status();
      EXPECT_TRUE(SameBits(*first, *second)) << config.DebugString();
    }
  }
}

TEST_F(GpuTest, ConfigOutsideTheCompiledSpaceIsInvalidArgument) {
  const TensorMap inputs = {{"x", RandomX(DType::kF32, {3, 7, 17}, 610)}};
  auto run = Prepare(inputs, gpu());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*run)->Launch(Config(8, 32, 3, 32)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*run)->Launch(Config(4, 256, 8, 32)).status().code(),  // 256 lanes > 128 threads
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Prepare(inputs, CpuDeviceInfo()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GpuTest, OutOfMemoryFailsOnlyThatRequest) {
  auto res = ThisThreadResources(gpu().ordinal);
  ASSERT_TRUE(res.ok()) << res.status();
  const size_t too_much = static_cast<size_t>(gpu().memory_total_bytes) * 4;
  auto huge = DeviceBuffer::Allocate(gpu().ordinal, too_much, (*res)->stream());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  // The next request runs normally.
  const TensorMap inputs = {{"x", RandomX(DType::kBF16, {3, 129, 1000}, 620)}};
  auto want = Reference(inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  auto run = Prepare(inputs, gpu());
  ASSERT_TRUE(run.ok()) << run.status();
  auto got = LaunchPoisoned(**run, Heuristic(inputs));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectMatches(*got, *want, "after out of memory");
}

TEST_F(GpuTest, ThreadsRunOnTheirOwnStreams) {
  constexpr int kThreads = 4;
  std::vector<TensorMap> inputs;
  std::vector<Tensor> want;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back({{"x", RandomX(DType::kF16, {3, 1000 + 37 * t, 512}, 630 + t)}});
    auto ref = Reference(inputs.back());
    ASSERT_TRUE(ref.ok()) << ref.status();
    want.push_back(*ref);
  }
  std::vector<absl::StatusOr<Tensor>> got(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto run = Prepare(inputs[t], gpu());
      if (!run.ok()) {
        got[t] = run.status();
        return;
      }
      const KernelConfig config = Heuristic(inputs[t]);
      for (int i = 0; i < 20 && run.ok(); ++i) got[t] = LaunchPoisoned(**run, config);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(got[t].ok()) << got[t].status();
    ExpectMatches(*got[t], want[t], "thread " + std::to_string(t));
  }
}

TEST_F(GpuTest, ReportsKernelAndUploadTimes) {
  const TensorMap inputs = {{"x", RandomX(DType::kF32, {16, 1024, 1024}, 640)}};
  auto run = Prepare(inputs, gpu());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GT((*run)->upload_seconds(), 0.0);
  auto seconds = (*run)->Launch(Heuristic(inputs));
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_GT(*seconds, 0.0);
  EXPECT_LT(*seconds, 1.0);  // 64 MiB read takes well under a millisecond on a current GPU
}

TEST_F(GpuTest, EmptyBatchAndZeroHidden) {
  for (const Shape& shape : {Shape{0, 5, 8}, Shape{2, 5, 0}, Shape{2, 0, 8}}) {
    const TensorMap inputs = {{"x", RandomX(DType::kF32, shape, 650)}};
    auto want = Reference(inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    auto run = Prepare(inputs, gpu());
    ASSERT_TRUE(run.ok()) << run.status();
    auto got = LaunchPoisoned(**run, Heuristic(inputs));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectMatches(*got, *want, ShapeString(shape));
  }
}

}  // namespace
}  // namespace kernelserve::cuda::testing
