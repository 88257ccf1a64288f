#include "core/kernel.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// A platform implementation that only reports its platform.
class FakeImpl : public PlatformImpl {
 public:
  explicit FakeImpl(Platform platform, int tag = 0) : platform_(platform), tag_(tag) {}
  Platform platform() const override { return platform_; }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap&, const Attributes&,
                                                       const DeviceInfo&) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status CheckConfig(const KernelConfig&, const TensorSpecMap&,
                           const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  int tag() const { return tag_; }

 private:
  Platform platform_;
  int tag_;
};

// A kernel whose candidate space is block_size in {32, 64} on any input.
class FakeKernel : public Kernel {
 public:
  std::string name() const override { return "mean_pooling"; }
  int version() const override { return 1; }
  std::vector<ArgDoc> input_docs() const override { return {}; }
  std::vector<ArgDoc> output_docs() const override { return {}; }
  std::vector<ArgDoc> attribute_docs() const override { return {}; }
  absl::Status Validate(const TensorSpecMap&, const Attributes&) const override {
    return absl::OkStatus();
  }
  TensorSpecMap OutputSpecs(const TensorSpecMap&, const Attributes&) const override { return {}; }
  KernelConfig HeuristicConfig(const TensorSpecMap&, const Attributes&,
                               const DeviceInfo&) const override {
    return Block(32);
  }
  std::vector<KernelConfig> CandidateConfigs(const TensorSpecMap&, const Attributes&,
                                             const DeviceInfo&) const override {
    return {Block(32), Block(64)};
  }
  static KernelConfig Block(int size) {
    KernelConfig config;
    config.block_size = size;
    config.platform = "cpu";
    return config;
  }
};

TEST(KernelTest, Id) { EXPECT_EQ(FakeKernel().id(), "mean_pooling@v1"); }

TEST(KernelTest, IsCandidate) {
  FakeKernel kernel;
  const DeviceInfo cpu = CpuDeviceInfo();
  EXPECT_TRUE(kernel.IsCandidate(FakeKernel::Block(64), {}, {}, cpu));
  EXPECT_FALSE(kernel.IsCandidate(FakeKernel::Block(128), {}, {}, cpu));
  KernelConfig other_platform = FakeKernel::Block(32);
  other_platform.platform = "cuda";
  EXPECT_FALSE(kernel.IsCandidate(other_platform, {}, {}, cpu));
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
  EXPECT_EQ(static_cast<FakeImpl*>(kernel.impl(Platform::kCpu))->tag(), 2);
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
