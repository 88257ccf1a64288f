#include "core/registry.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// A kernel with only a name and a version.
class NamedKernel : public Kernel {
 public:
  NamedKernel(std::string name, int version) : name_(std::move(name)), version_(version) {}
  std::string name() const override { return name_; }
  int version() const override { return version_; }
  std::vector<ArgDoc> input_docs() const override { return {}; }
  std::vector<ArgDoc> output_docs() const override { return {}; }
  std::vector<ArgDoc> attribute_docs() const override { return {}; }
  absl::Status Validate(const TensorSpecMap&, const Attributes&) const override {
    return absl::OkStatus();
  }
  TensorSpecMap OutputSpecs(const TensorSpecMap&, const Attributes&) const override { return {}; }
  KernelConfig HeuristicConfig(const TensorSpecMap&, const Attributes&,
                               const DeviceInfo&) const override {
    return {};
  }
  std::vector<KernelConfig> CandidateConfigs(const TensorSpecMap&, const Attributes&,
                                             const DeviceInfo&) const override {
    return {KernelConfig()};
  }

 private:
  std::string name_;
  int version_;
};

KernelRegistry TwoKernels() {
  KernelRegistry registry;
  EXPECT_TRUE(registry.Register(std::make_unique<NamedKernel>("mean_pooling", 1)).ok());
  EXPECT_TRUE(registry.Register(std::make_unique<NamedKernel>("flash_attention", 1)).ok());
  return registry;
}

TEST(KernelRegistryTest, FindByNameOrId) {
  KernelRegistry registry = TwoKernels();
  absl::StatusOr<const Kernel*> by_name = registry.Find("mean_pooling");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ((*by_name)->id(), "mean_pooling@v1");
  absl::StatusOr<const Kernel*> by_id = registry.Find("flash_attention@v1");
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  EXPECT_EQ((*by_id)->name(), "flash_attention");
}

TEST(KernelRegistryTest, UnknownNameIsInvalidArgument) {
  KernelRegistry registry = TwoKernels();
  absl::StatusOr<const Kernel*> found = registry.Find("foo");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(found.status().message(),
            "unknown kernel 'foo'; known: flash_attention@v1, mean_pooling@v1");
}

TEST(KernelRegistryTest, WrongVersionIsInvalidArgument) {
  KernelRegistry registry = TwoKernels();
  EXPECT_EQ(registry.Find("mean_pooling@v2").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Find("mean_pooling@").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Find("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelRegistryTest, DuplicateIsAlreadyExists) {
  KernelRegistry registry = TwoKernels();
  EXPECT_EQ(registry.Register(std::make_unique<NamedKernel>("mean_pooling", 2)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Find("mean_pooling").value()->version(), 1);
}

TEST(KernelRegistryTest, KernelsListed) {
  KernelRegistry registry = TwoKernels();
  std::vector<std::string> ids;
  for (const Kernel* kernel : registry.kernels()) ids.push_back(kernel->id());
  EXPECT_EQ(ids, (std::vector<std::string>{"flash_attention@v1", "mean_pooling@v1"}));
  EXPECT_TRUE(KernelRegistry().kernels().empty());
}

}  // namespace
}  // namespace kernelserve
