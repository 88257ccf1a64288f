// The CUDA mean_pooling_bwd platform against the CPU platform, bit for bit (both divide in
// float and round once), on every form and dtype, odd and large shapes, every candidate and
// configs at the limits, with poisoned outputs. Skips where no GPU is visible.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_config.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/kernels/runtime/cuda/cuda_test_util.h"

namespace kernelserve::cuda::testing {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

KernelConfig BwdConfig(int warps, int rows) {
  KernelConfig config;
  config.num_warps = warps;
  config.block_size = rows;
  config.platform = "cuda";
  return config;
}

class MeanPoolingBwdGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) GTEST_SKIP() << "no CUDA device visible";
    kernel_ = MakeMeanPoolingBwd();
  }

  absl::StatusOr<Tensor> Run(const PlatformImpl& impl, const Problem& problem,
                             const TensorMap& inputs, const DeviceInfo& device,
                             const KernelConfig& config) const {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, impl.Prepare(problem, inputs, device));
    if (device.platform == Platform::kCuda) KS_RETURN_IF_ERROR(PoisonOutputs(*run));
    KS_RETURN_IF_ERROR(run->Launch(config).status());
    KS_ASSIGN_OR_RETURN(TensorMap outputs, run->Fetch());
    return outputs.at("dx");
  }

  // Every candidate, the heuristic and configs at the limits against the CPU platform.
  void CheckAllConfigs(const TensorMap& inputs, const std::string& label) const {
    absl::StatusOr<std::shared_ptr<const Problem>> problem = kernel_->Analyze(SpecsOf(inputs), {});
    ASSERT_TRUE(problem.ok()) << label << ": " << problem.status();
    ASSERT_TRUE(kernel_->schema().CheckInputData(inputs).ok());
    ASSERT_TRUE(kernel_->ValidateData(**problem, inputs).ok());
    const PlatformImpl& cpu = *kernel_->impl(Platform::kCpu);
    const PlatformImpl& gpu = *kernel_->impl(Platform::kCuda);
    absl::StatusOr<Tensor> want = Run(cpu, **problem, inputs, CpuDeviceInfo(), KernelConfig{});
    ASSERT_TRUE(want.ok()) << label << ": " << want.status();
    std::vector<KernelConfig> configs = gpu.Candidates(**problem, devices_[0]);
    const KernelConfig heuristic = gpu.Heuristic(**problem, devices_[0]);
    EXPECT_TRUE(gpu.IsCandidate(heuristic, **problem, devices_[0])) << heuristic.DebugString();
    configs.push_back(heuristic);
    for (const KernelConfig& extra : {BwdConfig(1, 1), BwdConfig(3, 7), BwdConfig(32, 256)}) {
      configs.push_back(extra);
    }
    for (const KernelConfig& config : configs) {
      const std::string where = absl::StrCat(label, " {", config.DebugString(), "}");
      EXPECT_TRUE(gpu.CheckConfig(config, **problem, devices_[0]).ok()) << where;
      absl::StatusOr<Tensor> got = Run(gpu, **problem, inputs, devices_[0], config);
      ASSERT_TRUE(got.ok()) << where << ": " << got.status();
      ASSERT_EQ(got->spec(), want->spec()) << where;
      EXPECT_TRUE(got->bytes() == want->bytes())
          << where << ": " << AllClose(*got, *want, 0.0, 0.0).message;
    }
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

TensorMap Inputs(DType dtype, const Shape& x, const Shape& dout, uint64_t seed) {
  return {{"x", Tensor::ShapeOnly(dtype, x)}, {"dout", RandomTensor(dtype, dout, seed)}};
}

TEST_F(MeanPoolingBwdGpuTest, DenseAndMaskedMatchTheCpuPlatformBitForBit) {
  uint64_t seed = 500;
  for (DType dtype : kFloatTypes) {
    for (int64_t b : {1, 3}) {
      for (int64_t s : {1, 7, 129}) {
        for (int64_t h : {1, 17, 1000, 1024}) {
          const std::string shape = absl::StrCat(Sv(DTypeName(dtype)), "[", b, ",", s, ",", h, "]");
          TensorMap inputs = Inputs(dtype, {b, s, h}, {b, h}, ++seed);
          CheckAllConfigs(inputs, "dense " + shape);
          // Random rows counted; sequence 0 none when there are several.
          Tensor mask = RandomTensor(DType::kI32, {b, s}, ++seed, 0.0f, 2.0f);
          for (int64_t i = 0; i < s && b > 1; ++i) mask.SetFloat(i, 0.0f);
          inputs["mask"] = mask;
          CheckAllConfigs(inputs, "masked " + shape);
        }
      }
    }
  }
}

TEST_F(MeanPoolingBwdGpuTest, VarlenMatchesTheCpuPlatformBitForBit) {
  // Empty sequences first, inside and last; trailing rows past the last sequence get zeros.
  const std::vector<std::vector<int64_t>> batches = {
      {7}, {1, 7, 129}, {0, 129, 0, 1, 7, 0}, {129, 129, 0}};
  uint64_t seed = 600;
  for (DType dtype : kFloatTypes) {
    for (int64_t h : {1, 17, 1024}) {
      for (size_t i = 0; i < batches.size(); ++i) {
        int64_t rows = 0;
        for (int64_t n : batches[i]) rows += n;
        rows += static_cast<int64_t>(i % 2) * 5;
        const auto n = static_cast<int64_t>(batches[i].size());
        const Shape x = i % 2 == 0 ? Shape{1, rows, h} : Shape{rows, h};
        TensorMap inputs = Inputs(dtype, x, {n, h}, ++seed);
        inputs["cu_seqlens"] = Offsets(i < 2 ? DType::kI32 : DType::kI64, batches[i]);
        CheckAllConfigs(
            inputs, absl::StrCat("varlen ", Sv(DTypeName(dtype)), ShapeString(x), " batch ", i));
      }
    }
  }
}

TEST_F(MeanPoolingBwdGpuTest, LargeProblemMatches) {
  CheckAllConfigs(Inputs(DType::kBF16, {4, 4096, 1024}, {4, 1024}, 700), "bf16 [4,4096,1024]");
}

}  // namespace
}  // namespace kernelserve::cuda::testing
