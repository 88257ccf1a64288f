#include "core/kernel.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

KernelConfig Block(int size) {
  KernelConfig config;
  config.block_size = size;
  config.platform = "cpu";
  return config;
}

// A platform implementation whose candidate space is block_size in {32, 64}.
class FakeImpl : public PlatformImpl {
 public:
  explicit FakeImpl(Platform platform, int tag = 0) : platform_(platform), tag_(tag) {}
  Platform platform() const override { return platform_; }
  const ConfigSchema& config_schema() const override { return schema_; }
  absl::Status Supports(const Problem&, const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  KernelConfig Heuristic(const Problem&, const DeviceInfo&) const override { return Block(32); }
  std::vector<KernelConfig> Candidates(const Problem&, const DeviceInfo&) const override {
    return {Block(32), Block(64)};
  }
  absl::Status CheckConfig(const KernelConfig&, const Problem&, const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem&, const TensorMap&,
                                                       const DeviceInfo&) const override {
    return absl::UnimplementedError("fake");
  }
  int tag() const { return tag_; }

 private:
  Platform platform_;
  int tag_;
  const ConfigSchema schema_{};
};

// A kernel named mean_pooling taking x (f32, rank 1) and one int param `n` (>= 1).
class FakeKernel : public Kernel {
 public:
  const KernelSchema& schema() const override {
    static const KernelSchema* const schema =
        new KernelSchema{.name = "mean_pooling",
                         .version = 1,
                         .doc = "",
                         .inputs = {{"x", true, {DType::kF32}, {1}, "[N]", ""}},
                         .outputs = {},
                         .params = {{"n", ParamType::kInt, int64_t{1}, 1.0, std::nullopt, ""}},
                         .vjp = "",
                         .vjp_of = ""};
    return *schema;
  }
  TensorSpecMap OutputSpecs(const Problem&) const override { return {}; }
  mutable int analyses = 0;

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(const TensorSpecMap&,
                                                                const Attributes&) const override {
    ++analyses;
    return std::make_shared<const Problem>();
  }
};

TEST(KernelTest, Id) { EXPECT_EQ(FakeKernel().id(), "mean_pooling@v1"); }

TEST(KernelTest, IsCandidate) {
  FakeImpl impl(Platform::kCpu);
  const Problem problem;
  const DeviceInfo cpu = CpuDeviceInfo();
  EXPECT_TRUE(impl.IsCandidate(Block(64), problem, cpu));
  EXPECT_FALSE(impl.IsCandidate(Block(128), problem, cpu));
  KernelConfig other_platform = Block(32);
  other_platform.platform = "cuda";
  EXPECT_FALSE(impl.IsCandidate(other_platform, problem, cpu));
}

// The schema's checks come before the kernel's own analysis, which then runs once.
TEST(KernelTest, AnalyzeChecksTheSchemaFirst) {
  FakeKernel kernel;
  const TensorSpecMap good = {{"x", TensorSpec{DType::kF32, {4}}}};
  EXPECT_TRUE(kernel.Analyze(good, {}).ok());
  EXPECT_EQ(kernel.analyses, 1);
  const TensorSpecMap wrong_dtype = {{"x", TensorSpec{DType::kI32, {4}}}};
  EXPECT_EQ(kernel.Analyze(wrong_dtype, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernel.Analyze({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernel.analyses, 1);
}

TEST(KernelTest, AddImplAndLookup) {
  FakeKernel kernel;
  EXPECT_TRUE(kernel.platforms().empty());
  EXPECT_EQ(kernel.impl(Platform::kCpu), nullptr);
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCuda));
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu, 1));
  EXPECT_EQ(kernel.platforms(), (std::vector<Platform>{Platform::kCpu, Platform::kCuda}));
  ASSERT_NE(kernel.impl(Platform::kCpu), nullptr);
  EXPECT_EQ(kernel.impl(Platform::kCpu)->platform(), Platform::kCpu);
  EXPECT_EQ(kernel.impl(Platform::kCudnn), nullptr);
  // A second implementation of the same platform replaces the first.
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu, 2));
  EXPECT_EQ(kernel.platforms().size(), 2u);
  EXPECT_EQ(static_cast<const FakeImpl*>(kernel.impl(Platform::kCpu))->tag(), 2);
}

TEST(KernelTest, ResolveAuto) {
  FakeKernel both;
  both.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu));
  both.AddImpl(std::make_unique<FakeImpl>(Platform::kCuda));
  EXPECT_EQ(both.ResolvePlatform("auto", true).value(), Platform::kCuda);
  EXPECT_EQ(both.ResolvePlatform("", true).value(), Platform::kCuda);
  EXPECT_EQ(both.ResolvePlatform("auto", false).value(), Platform::kCpu);
  FakeKernel cpu_only;
  cpu_only.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu));
  EXPECT_EQ(cpu_only.ResolvePlatform("auto", true).value(), Platform::kCpu);
}

TEST(KernelTest, ResolveExplicit) {
  FakeKernel kernel;
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu));
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCuda));
  EXPECT_EQ(kernel.ResolvePlatform("cpu", true).value(), Platform::kCpu);
  EXPECT_EQ(kernel.ResolvePlatform("cuda", false).value(), Platform::kCuda);
}

TEST(KernelTest, ResolveMissingImplIsUnimplemented) {
  FakeKernel kernel;
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu));
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCuda));
  absl::StatusOr<Platform> p = kernel.ResolvePlatform("cudnn", true);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(p.status().message(),
            "kernel 'mean_pooling@v1' has no 'cudnn' implementation; available: cpu, cuda");
}

TEST(KernelTest, ResolveUnknownIsInvalidArgument) {
  FakeKernel kernel;
  kernel.AddImpl(std::make_unique<FakeImpl>(Platform::kCpu));
  EXPECT_EQ(kernel.ResolvePlatform("tpu", false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
