// Shared pieces of the GPU tests of the CUDA mean pooling platform (header-only, tests only).
#ifndef KERNELSERVE_TESTS_KERNELS_RUNTIME_CUDA_CUDA_TEST_UTIL_H_
#define KERNELSERVE_TESTS_KERNELS_RUNTIME_CUDA_CUDA_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/support/testing.h"

namespace kernelserve::cuda::testing {

// Skips the test (with a message) where no CUDA device is visible; otherwise holds the
// mean_pooling kernel with its CPU and CUDA implementations and device 0.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) {
      GTEST_SKIP() << "no CUDA device visible (no driver or no GPU): GPU tests run on a GPU "
                      "machine, see docs/GPU.md";
    }
    kernel_ = MakeMeanPooling();
  }

  const DeviceInfo& gpu() const { return devices_.front(); }
  const PlatformImpl& cuda_impl() const { return *kernel_->impl(Platform::kCuda); }

  // The kernel's analysis of `inputs` (no params).
  absl::StatusOr<std::shared_ptr<const Problem>> Analyze(const TensorMap& inputs) const {
    return kernel_->Analyze(SpecsOf(inputs), {});
  }
  // A CUDA run of `inputs` on `device`.
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs,
                                                       const DeviceInfo& device) const {
    KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem, Analyze(inputs));
    return cuda_impl().Prepare(*problem, inputs, device);
  }
  // The CUDA heuristic config of `inputs` on gpu().
  KernelConfig Heuristic(const TensorMap& inputs) const {
    return cuda_impl().Heuristic(**Analyze(inputs), gpu());
  }

  // The CPU reference output for `inputs` (checked as the executor would).
  absl::StatusOr<Tensor> Reference(const TensorMap& inputs) const {
    KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem, Analyze(inputs));
    KS_RETURN_IF_ERROR(kernel_->ValidateData(*problem, inputs));
    const DeviceInfo cpu = CpuDeviceInfo();
    const PlatformImpl& impl = *kernel_->impl(Platform::kCpu);
    KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, impl.Prepare(*problem, inputs, cpu));
    KS_RETURN_IF_ERROR(run->Launch(impl.Heuristic(*problem, cpu)).status());
    KS_ASSIGN_OR_RETURN(TensorMap outputs, run->Fetch());
    return outputs.at("out");
  }

  // Poisons the run's outputs, launches `config` and fetches "out".
  static absl::StatusOr<Tensor> LaunchPoisoned(PreparedRun& run, const KernelConfig& config) {
    KS_RETURN_IF_ERROR(PoisonOutputs(run));
    KS_ASSIGN_OR_RETURN(const double seconds, run.Launch(config));
    if (!(seconds >= 0.0)) return absl::InternalError("negative kernel time");
    KS_ASSIGN_OR_RETURN(TensorMap outputs, run.Fetch());
    return outputs.at("out");
  }

  // The heuristic config, every candidate and `extra` configs, each checked against the CPU
  // reference on the same inputs. Returns the number of configs run.
  int CheckAllConfigs(const TensorMap& inputs, const std::string& label,
                      const std::vector<KernelConfig>& extra = {}) const {
    absl::StatusOr<Tensor> want = Reference(inputs);
    EXPECT_TRUE(want.ok()) << label << ": " << want.status();
    if (!want.ok()) return 0;
    const std::shared_ptr<const Problem> problem = *Analyze(inputs);
    std::vector<KernelConfig> configs = cuda_impl().Candidates(*problem, gpu());
    configs.insert(configs.begin(), cuda_impl().Heuristic(*problem, gpu()));
    configs.insert(configs.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<PreparedRun>> run = cuda_impl().Prepare(*problem, inputs, gpu());
    EXPECT_TRUE(run.ok()) << label << ": " << run.status();
    if (!run.ok()) return 0;
    for (const KernelConfig& config : configs) {
      const std::string where = label + " config {" + config.DebugString() + "}";
      const absl::Status checked = cuda_impl().CheckConfig(config, *problem, gpu());
      EXPECT_TRUE(checked.ok()) << where << ": " << checked;
      absl::StatusOr<Tensor> got = LaunchPoisoned(**run, config);
      EXPECT_TRUE(got.ok()) << where << ": " << got.status();
      if (got.ok()) ExpectMatches(*got, *want, where);
    }
    return static_cast<int>(configs.size());
  }

  // Element-wise |got - want| <= atol + rtol |want|: rtol one unit in the last place of the
  // output dtype (the two sides round float means that differ only in summation order), atol
  // far below any value of these tests. NaN (a poisoned, unwritten element) always fails.
  static void ExpectMatches(const Tensor& got, const Tensor& want, const std::string& where) {
    ASSERT_EQ(got.spec(), want.spec()) << where;
    double rtol = 1e-5;  // f32: float sums in another order
    if (want.dtype() == DType::kF16) rtol = 1.0 / 1024;
    if (want.dtype() == DType::kBF16) rtol = 1.0 / 128;
    const AllCloseResult result = AllClose(got, want, rtol, /*atol=*/1e-6);
    EXPECT_TRUE(result.ok) << where << ": " << result.message << " (" << result.num_bad << " bad)";
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

// x with values uniform in [-0.5, 1.5) (means near 0.5, never all zero).
inline Tensor RandomX(DType dtype, const Shape& shape, uint64_t seed) {
  return RandomTensor(dtype, shape, seed, -0.5f, 1.5f);
}

// cu_seqlens of `lengths` as `dtype`.
inline Tensor Offsets(DType dtype, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets = {0};
  for (int64_t n : lengths) offsets.push_back(offsets.back() + n);
  return Tensor::FromInts(dtype, {static_cast<int64_t>(offsets.size())}, offsets);
}

inline KernelConfig Config(int warps, int lanes, int stages, int rows) {
  KernelConfig config;
  config.num_warps = warps;
  config.named["lanes"] = lanes;
  config.num_stages = stages;
  config.block_size = rows;
  config.platform = "cuda";
  return config;
}

}  // namespace kernelserve::cuda::testing

#endif  // KERNELSERVE_TESTS_KERNELS_RUNTIME_CUDA_CUDA_TEST_UTIL_H_
