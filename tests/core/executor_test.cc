#include "core/executor.h"

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/recorder.h"
#include "gtest/gtest.h"
#include "kernels/register.h"
#include "tests/support/fake_kernel.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::FakeConfig;
using ::kernelserve::testing::FakeCounters;
using ::kernelserve::testing::FakeGpu;
using ::kernelserve::testing::FakeKernel;

// An executor over the built-in kernels and the fake one, CPU only, memory tier only.
class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinKernels(&registry_).ok());
    ASSERT_TRUE(registry_.Register(std::make_unique<FakeKernel>(counters_)).ok());
  }
  Executor MakeExecutor(ExecutorOptions options = {}) {
    return Executor(&registry_, &chain_, /*gpus=*/{}, options);
  }
  static TensorMap PoolingInputs(uint64_t seed) {
    return {{"x", RandomTensor(DType::kF32, {3, 7, 17}, seed, -1.0f, 1.0f)}};
  }

  std::shared_ptr<FakeCounters> counters_ = std::make_shared<FakeCounters>();
  KernelRegistry registry_;
  ConfigCache memory_;
  ConfigSelectorChain chain_{&memory_, nullptr};
};

TEST_F(ExecutorTest, RunsOnTheCpuAndReportsEverything) {
  Executor executor = MakeExecutor();
  TensorMap in = PoolingInputs(1);
  absl::StatusOr<ExecuteResult> r = executor.Execute("mean_pooling", in, {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.count("out"), 1u);
  EXPECT_EQ(r->outputs.at("out").shape(), (Shape{3, 17}));
  // The mean of column 0 of batch 1, computed here.
  double sum = 0;
  for (int s = 0; s < 7; ++s) sum += in.at("x").GetFloat((1 * 7 + s) * 17);
  EXPECT_NEAR(r->outputs.at("out").GetFloat(17), sum / 7, 1e-6);
  EXPECT_EQ(r->platform, Platform::kCpu);
  EXPECT_EQ(r->device, -1);
  EXPECT_EQ(r->source, ConfigSource::kHeuristic);
  EXPECT_EQ(r->config.platform, "cpu");
  EXPECT_EQ(r->device_fingerprint, CpuDeviceInfo().fingerprint.Hash());
  EXPECT_EQ(r->cache_key.rfind("mean_pooling@v1:", 0), 0u);
  EXPECT_GE(r->timings.total_us, r->timings.kernel_us);
  EXPECT_GE(r->timings.kernel_us, 0);

  absl::StatusOr<ExecuteResult> again = executor.Execute("mean_pooling", PoolingInputs(2), {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, ConfigSource::kMemory);
  EXPECT_EQ(again->cache_key, r->cache_key);
}

TEST_F(ExecutorTest, BadCallsGetTheirCodes) {
  Executor executor = MakeExecutor();
  TensorMap in = PoolingInputs(3);
  EXPECT_EQ(executor.Execute("no_such_kernel", in, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(executor.Execute("mean_pooling", {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExecuteOptions cudnn;
  cudnn.platform = "cudnn";
  EXPECT_EQ(executor.Execute("mean_pooling", in, {}, cudnn).status().code(),
            absl::StatusCode::kUnimplemented);
  ExecuteOptions bogus;
  bogus.platform = "tpu";
  EXPECT_EQ(executor.Execute("mean_pooling", in, {}, bogus).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExecuteOptions gpu3;
  gpu3.device = 3;
  EXPECT_EQ(executor.Execute("mean_pooling", in, {}, gpu3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A GPU implementation that handles no input at all.
class NothingOnGpu : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCuda; }
  const ConfigSchema& config_schema() const override { return schema_; }
  absl::Status Supports(const Problem&, const DeviceInfo&) const override {
    return absl::UnimplementedError("no GPU kernel for these inputs");
  }
  KernelConfig Heuristic(const Problem&, const DeviceInfo&) const override { return {}; }
  std::vector<KernelConfig> Candidates(const Problem&, const DeviceInfo&) const override {
    return {};
  }
  absl::Status CheckConfig(const KernelConfig&, const Problem&, const DeviceInfo&) const override {
    return absl::UnimplementedError("no GPU kernel for these inputs");
  }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem&, const TensorMap&,
                                                       const DeviceInfo&) const override {
    return absl::UnimplementedError("no GPU kernel for these inputs");
  }

 private:
  const ConfigSchema schema_{};
};

TEST(ExecutorRoutingTest, AutoFallsBackToTheCpuWhenTheGpuCannotRunTheInputs) {
  auto kernel = std::make_unique<FakeKernel>(std::make_shared<FakeCounters>());
  kernel->AddImpl(std::make_unique<NothingOnGpu>());
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(std::move(kernel)).ok());
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  const DeviceInfo gpu = FakeGpu();
  Executor executor(&registry, &chain, {gpu});
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {2}, {1, 2})}};
  absl::StatusOr<ExecuteResult> automatic = executor.Execute("fake_scale", in, {});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->platform, Platform::kCpu);
  ExecuteOptions cuda;
  cuda.platform = "cuda";
  EXPECT_EQ(executor.Execute("fake_scale", in, {}, cuda).status().code(),
            absl::StatusCode::kUnimplemented);
}

// Each platform name is one implementation: "cuda" runs the cuda platform's configs alone,
// "cudnn" cudnn's, and "auto" the kernel's GPU auto, which picks among both and says which ran.
TEST(ExecutorRoutingTest, EachPlatformNameRunsItsOwnImplementationAndAutoPicksAmongThem) {
  auto counters = std::make_shared<FakeCounters>();
  auto kernel = std::make_unique<FakeKernel>(counters);
  testing::AddFakeGpuPlatforms(kernel.get(), counters);
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(std::move(kernel)).ok());
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  Executor executor(&registry, &chain, {FakeGpu()});
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {2}, {1, 2})}};

  struct Case {
    std::string requested;
    Platform ran;
    std::string config_platform;
    std::string keyed;  // the invocation's platform, which the cache key holds
  };
  for (const Case& c : {Case{"cuda", Platform::kCuda, "cuda", "cuda"},
                        Case{"cudnn", Platform::kCudnn, "cudnn", "cudnn"},
                        Case{"auto", Platform::kCudnn, "cudnn", "auto"},
                        Case{"", Platform::kCudnn, "cudnn", "auto"}}) {
    SCOPED_TRACE(c.requested);
    ExecuteOptions options;
    options.platform = c.requested;
    absl::StatusOr<CallPlan> plan = executor.Plan("fake_scale", SpecsOf(in), {}, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->invocation.platform, c.keyed);
    absl::StatusOr<ExecuteResult> r = executor.Execute("fake_scale", in, {}, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->platform, c.ran);
    EXPECT_EQ(r->config.platform, c.config_platform);
  }

  // A config of the other GPU platform is refused on a named one, and runs on auto.
  ExecuteOptions cuda;
  cuda.platform = "cuda";
  cuda.config = FakeConfig(3, "cudnn");
  EXPECT_EQ(executor.Execute("fake_scale", in, {}, cuda).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExecuteOptions automatic;
  automatic.config = FakeConfig(3, "cuda");
  absl::StatusOr<ExecuteResult> own = executor.Execute("fake_scale", in, {}, automatic);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->platform, Platform::kCuda);

  // Tuning on auto compares the configs of both platforms; on cuda, its own alone.
  ExecuteOptions tune;
  tune.policy.allow_autotune = true;
  const TensorSpecMap specs = {{"x", TensorSpec{DType::kF32, {3}}}};
  absl::StatusOr<AutotuneResult> tuned = executor.Autotune("fake_scale", specs, {}, tune);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  ASSERT_TRUE(tuned->selection.tune_report.has_value());
  std::set<std::string> platforms;
  for (const CandidateResult& c : tuned->selection.tune_report->candidates) {
    platforms.insert(c.config.platform);
  }
  EXPECT_EQ(platforms, (std::set<std::string>{"cuda", "cudnn"}));
  EXPECT_EQ(tuned->selection.config.block_size, 3);  // 4 is faster but wrong, 5 fails
  tune.platform = "cuda";
  tuned = executor.Autotune("fake_scale", specs, {}, tune);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  platforms.clear();
  for (const CandidateResult& c : tuned->selection.tune_report->candidates) {
    platforms.insert(c.config.platform);
  }
  EXPECT_EQ(platforms, (std::set<std::string>{"cuda"}));
}

TEST_F(ExecutorTest, PolicyLayersAndAutotune) {
  ExecutorOptions options;
  options.policy.allow_autotune = false;
  Executor executor = MakeExecutor(options);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {3}, {1, 2, 3})}};
  EXPECT_FALSE(executor.EffectivePolicy({}).allow_autotune);
  {
    AutotunePolicy tuning = options.policy;
    tuning.allow_autotune = true;
    tuning.iters = 2;
    ScopedPolicyOverride scoped(tuning);
    EXPECT_TRUE(executor.EffectivePolicy({}).allow_autotune);
    PolicyPatch off;
    off.allow_autotune = false;
    EXPECT_FALSE(executor.EffectivePolicy(off).allow_autotune);

    absl::StatusOr<ExecuteResult> r = executor.Execute("fake_scale", in, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->source, ConfigSource::kAutotune);
    EXPECT_EQ(r->config, FakeConfig(3));
    EXPECT_FLOAT_EQ(r->outputs.at("out").GetFloat(2), 6.0f);
  }
  EXPECT_FALSE(executor.EffectivePolicy({}).allow_autotune);
  EXPECT_EQ(counters_->prepares, 1);  // tuning and the run share one prepared call
}

// A hold that counts itself in `held` while it lives.
class CountingHold final : public DeviceHold {
 public:
  explicit CountingHold(std::atomic<int>* held) : held_(held) { ++*held_; }
  ~CountingHold() override { --*held_; }

 private:
  std::atomic<int>* const held_;
};

// Tuning on a GPU times its candidates under the device hold, and only tuning does: plain runs
// and CPU calls take no hold.
TEST(ExecutorHoldTest, TuningOnAGpuHoldsTheDeviceWhileCandidatesAreTimed) {
  auto counters = std::make_shared<FakeCounters>();
  KernelRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<FakeKernel>(counters, /*also_cuda=*/true)).ok());
  ConfigCache memory;
  ConfigSelectorChain chain(&memory, nullptr);
  const DeviceInfo gpu = FakeGpu();
  std::atomic<int> held{0};
  std::atomic<int> holds{0};
  std::vector<int> held_devices;
  ExecutorOptions options;
  options.hold_device = [&](int device) -> std::unique_ptr<DeviceHold> {
    ++holds;
    held_devices.push_back(device);
    return std::make_unique<CountingHold>(&held);
  };
  Executor executor(&registry, &chain, {gpu}, options);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {3}, {1, 2, 3})}};
  ExecuteOptions cuda;
  cuda.platform = "cuda";
  ASSERT_TRUE(executor.Execute("fake_scale", in, {}, cuda).ok());  // heuristic: no tuning
  EXPECT_EQ(holds.load(), 0);

  cuda.policy.allow_autotune = true;
  TensorMap other = {{"x", Tensor::FromFloats(DType::kF32, {4}, {1, 2, 3, 4})}};  // a cache miss
  absl::StatusOr<ExecuteResult> tuned = executor.Execute("fake_scale", other, {}, cuda);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->source, ConfigSource::kAutotune);
  EXPECT_EQ(holds.load(), 1);
  EXPECT_EQ(held.load(), 0);  // released when the timing ended
  ASSERT_TRUE(
      executor.Autotune("fake_scale", {{"x", TensorSpec{DType::kF32, {5}}}}, {}, cuda).ok());
  EXPECT_EQ(holds.load(), 2);
  EXPECT_EQ(held_devices, (std::vector<int>{0, 0}));

  ExecuteOptions cpu;
  cpu.platform = "cpu";
  cpu.policy.allow_autotune = true;
  ASSERT_TRUE(executor.Autotune("fake_scale", {{"x", TensorSpec{DType::kF32, {7}}}}, {}, cpu).ok());
  EXPECT_EQ(holds.load(), 2);  // the CPU runs one call at a time anyway
}

TEST_F(ExecutorTest, AutotuneFromShapesAloneStoresTheWinner) {
  Executor executor = MakeExecutor();
  absl::StatusOr<AutotuneResult> r =
      executor.Autotune("fake_scale", {{"x", TensorSpec{DType::kF32, {5}}}}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selection.source, ConfigSource::kAutotune);
  EXPECT_EQ(r->selection.config, FakeConfig(3));
  ASSERT_TRUE(r->selection.tune_report.has_value());
  EXPECT_EQ(r->selection.tune_report->candidates.size(), 5u);
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {5}, {1, 2, 3, 4, 5})}};
  EXPECT_EQ(executor.Execute("fake_scale", in, {})->source, ConfigSource::kMemory);
}

TEST_F(ExecutorTest, RecorderWarmsTheCache) {
  Recorder recorder;
  ExecutorOptions options;
  options.recorder = &recorder;
  Executor executor = MakeExecutor(options);
  for (int n : {4, 4, 6}) {
    TensorMap in = {{"x", RandomTensor(DType::kF32, {n}, static_cast<uint64_t>(n), -1, 1)}};
    ASSERT_TRUE(executor.Execute("fake_scale", in, {}).ok());
  }
  std::vector<RecordedCall> calls = recorder.List();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].count, 2);
  EXPECT_EQ(calls[1].count, 1);
  memory_.Clear();
  std::vector<absl::StatusOr<AutotuneResult>> tuned = AutotuneAll(executor, recorder);
  ASSERT_EQ(tuned.size(), 2u);
  for (const auto& t : tuned) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->selection.config, FakeConfig(3));
  }
  TensorMap in = {{"x", RandomTensor(DType::kF32, {6}, 9, -1, 1)}};
  absl::StatusOr<ExecuteResult> r = executor.Execute("fake_scale", in, {});
  EXPECT_EQ(r->source, ConfigSource::kMemory);
  EXPECT_EQ(r->config, FakeConfig(3));
}

TEST_F(ExecutorTest, BatchSharesOneConfigAndIsolatesBadItems) {
  Executor executor = MakeExecutor();
  std::vector<TensorMap> items = {PoolingInputs(10),
                                  PoolingInputs(11),
                                  {{"x", RandomTensor(DType::kF32, {3, 7}, 12, -1, 1)}},
                                  PoolingInputs(13),
                                  PoolingInputs(14)};
  BatchOptions options;
  options.devices = {-1, -1};  // spread over two CPU workers
  absl::StatusOr<CallPlan> first = executor.Plan("mean_pooling", SpecsOf(items[0]), {});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<BatchResult> batch = ExecuteBatch(executor, *first, items, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), items.size());
  EXPECT_EQ(batch->source, ConfigSource::kHeuristic);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i == 2) {
      EXPECT_EQ(batch->items[i].status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(batch->items[i].ok()) << i << ": " << batch->items[i].status();
    EXPECT_EQ(batch->items[i]->config, batch->config);
    EXPECT_EQ(batch->items[i]->source, batch->source);
    // Each item's own result: compare with a single call of that item.
    absl::StatusOr<ExecuteResult> single = executor.Execute("mean_pooling", items[i], {});
    EXPECT_EQ(batch->items[i]->outputs.at("out").bytes(), single->outputs.at("out").bytes());
  }
  EXPECT_EQ(ExecuteBatch(executor, *first, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A call is looked up and analysed once, when planned; running the plan (again) does neither.
TEST_F(ExecutorTest, OneLookupAndOneAnalysisPerCall) {
  Executor executor = MakeExecutor();
  TensorMap in = {{"x", Tensor::FromFloats(DType::kF32, {3}, {1, 2, 3})}};
  const int64_t lookups = registry_.lookups();
  absl::StatusOr<CallPlan> plan = executor.Plan("fake_scale", SpecsOf(in), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(registry_.lookups() - lookups, 1);
  EXPECT_EQ(counters_->analyses, 1);
  ASSERT_TRUE(executor.Run(*plan, in).ok());
  ASSERT_TRUE(executor.Run(*plan, in).ok());
  ASSERT_TRUE(executor.Tune(*plan, &in).ok());
  EXPECT_EQ(registry_.lookups() - lookups, 1);
  EXPECT_EQ(counters_->analyses, 1);
  ASSERT_TRUE(executor.Execute("fake_scale", in, {}).ok());
  EXPECT_EQ(registry_.lookups() - lookups, 2);
  EXPECT_EQ(counters_->analyses, 2);
}

// Params are checked by the kernel's schema when the call is planned, each error naming it.
TEST_F(ExecutorTest, ParamsAreCheckedByTheSchema) {
  Executor executor = MakeExecutor();
  const TensorSpecMap specs = SpecsOf(PoolingInputs(20));
  struct Case {
    Attributes params;
    std::string expected;
  };
  const Case cases[] = {
      {{{"chunk_size", int64_t{0}}}, "param 'chunk_size' = 0 is out of range: expected >= 1"},
      {{{"chunk_size", std::string("big")}}, "param 'chunk_size': expected int, got a string"},
      {{{"chunk_size", 1.5}}, "param 'chunk_size': expected int, got a float"},
      {{{"chunk", int64_t{4}}}, "unknown param 'chunk' of mean_pooling: expected chunk_size"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CallPlan> plan = executor.Plan("mean_pooling", specs, c.params);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_EQ(plan.status().message().substr(0, c.expected.size()), c.expected);
  }
  absl::StatusOr<CallPlan> missing = executor.Plan("mean_pooling", {}, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message().rfind("missing input 'x'", 0), 0u);
  // The default written out is the same call as the default left out: one cache key.
  absl::StatusOr<CallPlan> given =
      executor.Plan("mean_pooling", specs, {{"chunk_size", int64_t{32}}});
  absl::StatusOr<CallPlan> left_out = executor.Plan("mean_pooling", specs, {});
  ASSERT_TRUE(given.ok() && left_out.ok());
  EXPECT_EQ(given->cache_key, left_out->cache_key);
}

}  // namespace
}  // namespace kernelserve
