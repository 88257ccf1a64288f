#include "core/registry.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// A kernel with only a name and a version.
class NamedKernel : public Kernel {
 public:
  NamedKernel(std::string name, int version) {
    schema_.name = std::move(name);
    schema_.version = version;
  }
  const KernelSchema& schema() const override { return schema_; }
  TensorSpecMap OutputSpecs(const Problem&) const override { return {}; }

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(const TensorSpecMap&,
                                                                const Attributes&) const override {
    return std::make_shared<const Problem>();
  }

 private:
  KernelSchema schema_;
};

std::unique_ptr<KernelRegistry> TwoKernels() {
  auto registry = std::make_unique<KernelRegistry>();
  EXPECT_TRUE(registry->Register(std::make_unique<NamedKernel>("mean_pooling", 1)).ok());
  EXPECT_TRUE(registry->Register(std::make_unique<NamedKernel>("flash_attention", 1)).ok());
  return registry;
}

TEST(KernelRegistryTest, FindByNameOrId) {
  const std::unique_ptr<KernelRegistry> owned = TwoKernels();
  KernelRegistry& registry = *owned;
  absl::StatusOr<const Kernel*> by_name = registry.Find("mean_pooling");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ((*by_name)->id(), "mean_pooling@v1");
  absl::StatusOr<const Kernel*> by_id = registry.Find("flash_attention@v1");
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  EXPECT_EQ((*by_id)->name(), "flash_attention");
}

TEST(KernelRegistryTest, UnknownNameIsInvalidArgument) {
  const std::unique_ptr<KernelRegistry> owned = TwoKernels();
  KernelRegistry& registry = *owned;
  absl::StatusOr<const Kernel*> found = registry.Find("foo");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(found.status().message(),
            "unknown kernel 'foo'; known: flash_attention@v1, mean_pooling@v1");
}

TEST(KernelRegistryTest, WrongVersionIsInvalidArgument) {
  const std::unique_ptr<KernelRegistry> owned = TwoKernels();
  KernelRegistry& registry = *owned;
  EXPECT_EQ(registry.Find("mean_pooling@v2").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Find("mean_pooling@").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Find("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelRegistryTest, DuplicateIsAlreadyExists) {
  const std::unique_ptr<KernelRegistry> owned = TwoKernels();
  KernelRegistry& registry = *owned;
  EXPECT_EQ(registry.Register(std::make_unique<NamedKernel>("mean_pooling", 2)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Find("mean_pooling").value()->version(), 1);
}

TEST(KernelRegistryTest, KernelsListed) {
  const std::unique_ptr<KernelRegistry> owned = TwoKernels();
  KernelRegistry& registry = *owned;
  std::vector<std::string> ids;
  for (const Kernel* kernel : registry.kernels()) ids.push_back(kernel->id());
  EXPECT_EQ(ids, (std::vector<std::string>{"flash_attention@v1", "mean_pooling@v1"}));
  EXPECT_TRUE(KernelRegistry().kernels().empty());
}

}  // namespace
}  // namespace kernelserve
