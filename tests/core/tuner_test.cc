#include "core/tuner.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve {
namespace {

TEST(BenchmarkTest, ReturnsTheMedianAfterWarmup) {
  std::vector<double> times = {100.0, 5.0, 1.0, 3.0, 2.0, 4.0};  // the first is warmup
  size_t next = 0;
  absl::StatusOr<double> median = Benchmark([&] { return times[next++]; }, 1, 5);
  ASSERT_TRUE(median.ok());
  EXPECT_DOUBLE_EQ(*median, 3.0);
  EXPECT_EQ(next, 6u);
}

TEST(BenchmarkTest, PropagatesTheFirstError) {
  int calls = 0;
  absl::StatusOr<double> r = Benchmark(
      [&]() -> absl::StatusOr<double> {
        if (++calls == 3) return absl::InternalError("boom");
        return 1.0;
      },
      1, 5);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 3);
}

TEST(OutputsRelativeErrorTest, MeasuresAndRejectsNaN) {
  TensorMap ref = {{"out", Tensor::FromFloats(DType::kF32, {2}, {3.0f, 4.0f})}};
  TensorMap same = ref;
  EXPECT_EQ(OutputsRelativeError(same, ref), 0.0);
  TensorMap off = {{"out", Tensor::FromFloats(DType::kF32, {2}, {3.0f, 4.5f})}};
  EXPECT_NEAR(OutputsRelativeError(off, ref), 0.5 / 5.0, 1e-9);
  TensorMap nan = {{"out", Tensor::FromFloats(DType::kF32, {2}, {3.0f, NAN})}};
  EXPECT_TRUE(std::isinf(OutputsRelativeError(nan, ref)));
  TensorMap renamed = {{"y", ref.at("out")}};
  EXPECT_TRUE(std::isinf(OutputsRelativeError(renamed, ref)));
}

TEST(AutotuneTest, BudgetSkipsLaterCandidates) {
  auto counters = std::make_shared<testing::FakeCounters>();
  testing::FakeKernel kernel(counters);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {2}, {1.0f, 2.0f})}};
  auto run = *kernel.impl(Platform::kCpu)->Prepare(Problem(), in, CpuDeviceInfo());
  counters->launch_delay_ms = 20;
  TuneOptions options;
  options.warmup = 0;
  options.iters = 1;
  options.time_budget = absl::Milliseconds(10);
  absl::StatusOr<TuneReport> report = Autotune(
      *run, testing::FakeConfig(1), {testing::FakeConfig(2), testing::FakeConfig(3)}, options);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->candidates[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(report->all_failed);
  EXPECT_EQ(report->best, testing::FakeConfig(1));
  EXPECT_TRUE(report->budget_reached);
  EXPECT_EQ(report->candidates_run, 0);
}

TEST(AutotuneTest, ReportsProgressAndHowFarTheBudgetGot) {
  auto counters = std::make_shared<testing::FakeCounters>();
  testing::FakeKernel kernel(counters);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {2}, {1.0f, 2.0f})}};
  auto run = *kernel.impl(Platform::kCpu)->Prepare(Problem(), in, CpuDeviceInfo());
  counters->launch_delay_ms = 20;
  TuneOptions options;
  options.warmup = 0;
  options.iters = 1;
  options.time_budget = absl::Milliseconds(30);  // the reference run and one candidate, or two
  std::vector<TuneProgress> told;
  options.progress = [&told](const TuneProgress& progress) { told.push_back(progress); };
  const std::vector<KernelConfig> candidates = {testing::FakeConfig(2), testing::FakeConfig(3),
                                                testing::FakeConfig(4), testing::FakeConfig(5)};
  absl::StatusOr<TuneReport> report = Autotune(*run, testing::FakeConfig(1), candidates, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->budget_reached);
  EXPECT_GE(report->candidates_run, 1);
  EXPECT_LT(report->candidates_run, 4);
  EXPECT_FALSE(report->all_failed);
  EXPECT_EQ(report->candidates[3].status.code(), absl::StatusCode::kDeadlineExceeded);
  // Once after the reference run, then once per candidate that ran.
  ASSERT_EQ(told.size(), static_cast<size_t>(report->candidates_run) + 1);
  for (size_t i = 0; i < told.size(); ++i) {
    EXPECT_EQ(told[i].done, static_cast<int>(i));
    EXPECT_EQ(told[i].total, 4);
    EXPECT_EQ(told[i].best_seconds > 0, i > 0) << i;
    if (i > 0) EXPECT_GE(told[i].elapsed_seconds, told[i - 1].elapsed_seconds);
  }
  EXPECT_DOUBLE_EQ(told.back().best_seconds, report->best_seconds);

  options.time_budget = absl::InfiniteDuration();
  report = Autotune(*run, testing::FakeConfig(1), candidates, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->budget_reached);
  EXPECT_EQ(report->candidates_run, 4);
}

TEST(AutotuneTest, HeuristicFailureIsAnError) {
  auto counters = std::make_shared<testing::FakeCounters>();
  testing::FakeKernel kernel(counters);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {1}, {1.0f})}};
  auto run = *kernel.impl(Platform::kCpu)->Prepare(Problem(), in, CpuDeviceInfo());
  EXPECT_EQ(Autotune(*run, testing::FakeConfig(5), {testing::FakeConfig(1)}, TuneOptions{})
                .status()
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace kernelserve
