// The example kernel of docs/ADDING_A_KERNEL.md (tests/support/example_kernel.*, rms_norm) in
// process: its CPU platform against a float64 reference over dtypes x odd shapes x configs into
// poisoned outputs, its configs, and the exact errors of bad calls. The same kernel served by
// kernelserve-toy-server is tested in server_toy_kernel_test.cc and tests/client/.
#include "tests/support/example_kernel.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/example_kernel_cpu.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

struct Tolerance {
  double rtol;
  double atol;
};

// The kernel sums in float and rounds `out` once: the error is the rounding of out (half an
// ulp) plus float sums over at most a few thousand columns.
Tolerance ToleranceOf(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return {1e-3, 1e-3};
    case DType::kBF16:
      return {8e-3, 8e-3};
    default:
      return {1e-5, 1e-6};
  }
}

// out = x / sqrt(mean(x^2) + eps) * weight over the last axis, in float64 on the inputs'
// values.
std::vector<double> Reference(const Tensor& x, const Tensor* weight, double eps) {
  const std::vector<double> values = x.ToDoubles();
  const int64_t hidden = x.shape().back();
  const std::vector<double> w =
      weight != nullptr ? weight->ToDoubles() : std::vector<double>(hidden, 1.0);
  std::vector<double> out(values.size());
  for (size_t first = 0; first < values.size(); first += static_cast<size_t>(hidden)) {
    double squares = 0.0;
    for (int64_t h = 0; h < hidden; ++h) squares += values[first + h] * values[first + h];
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h) out[first + h] = values[first + h] * inv * w[h];
  }
  return out;
}

// The raw kernel into a NaN-poisoned out: every element must be written.
absl::StatusOr<Tensor> RunRaw(const Tensor& x, const Tensor* weight, double eps,
                              const KernelConfig& config) {
  Tensor out = Tensor::Empty(x.dtype(), x.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out.SetFloat(i, std::nanf(""));
  RmsNormArgs args;
  args.dtype = x.dtype();
  args.hidden = x.shape().back();
  args.rows = args.hidden == 0 ? 0 : x.numel() / args.hidden;
  args.x = x.data();
  args.weight = weight != nullptr ? weight->data() : nullptr;
  args.out = out.data();
  args.eps = eps;
  if (absl::Status status = RmsNormCpu(args, config); !status.ok()) return status;
  return out;
}

TEST(ExampleKernelTest, MatchesFloat64ReferenceOnOddShapesAndEveryConfig) {
  const std::unique_ptr<Kernel> kernel = MakeExampleKernel();
  const PlatformImpl& cpu = *kernel->impl(Platform::kCpu);
  const std::vector<Shape> shapes = {{1}, {7}, {3, 17}, {2, 5, 33}, {1, 2, 3, 1000}, {67, 129}};
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Shape& shape : shapes) {
      for (bool with_weight : {false, true}) {
        for (double eps : {1e-6, 0.5}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape)
                                            << " weight=" << with_weight << " eps=" << eps);
          TensorMap inputs = {{"x", RandomTensor(dtype, shape, seed++)}};
          if (with_weight) inputs["weight"] = RandomTensor(dtype, {shape.back()}, seed++);
          const Tensor* weight = with_weight ? &inputs.at("weight") : nullptr;
          const Attributes params = {{"eps", eps}};
          const std::vector<double> want = Reference(inputs.at("x"), weight, eps);
          const Tolerance tol = ToleranceOf(dtype);
          auto problem = AnalyzeCall(*kernel, SpecsOf(inputs), params);
          ASSERT_TRUE(problem.ok()) << problem.status();
          std::vector<KernelConfig> configs = cpu.Candidates(**problem, CpuDevice(4));
          configs.push_back(KernelConfig{});  // the kernel's defaults
          const std::string first_bits = [&] {
            absl::StatusOr<Tensor> out = RunRaw(inputs.at("x"), weight, eps, configs[0]);
            return out.ok() ? std::string(out->bytes()) : std::string();
          }();
          for (const KernelConfig& config : configs) {
            SCOPED_TRACE(config.DebugString());
            absl::StatusOr<Tensor> raw = RunRaw(inputs.at("x"), weight, eps, config);
            ASSERT_TRUE(raw.ok()) << raw.status();
            const AllCloseResult close = AllClose(raw->ToDoubles(), want, tol.rtol, tol.atol);
            EXPECT_TRUE(close.ok) << close.message;
            // Rows are independent: every config gives the same bits, through the platform too.
            EXPECT_EQ(std::string(raw->bytes()), first_bits);
            absl::StatusOr<TensorMap> served = RunOnCpu(*kernel, inputs, params, config);
            ASSERT_TRUE(served.ok()) << served.status();
            EXPECT_EQ(served->at("out").shape(), shape);
            EXPECT_EQ(std::string(served->at("out").bytes()), first_bits);
          }
        }
      }
    }
  }
}

TEST(ExampleKernelTest, HeuristicIsAPureCandidate) {
  const std::unique_ptr<Kernel> kernel = MakeExampleKernel();
  const PlatformImpl& cpu = *kernel->impl(Platform::kCpu);
  for (const Shape& shape : {Shape{1}, Shape{4096, 4096}}) {
    for (int threads : {1, 2, 16}) {
      auto problem = AnalyzeCall(*kernel, {{"x", TensorSpec{DType::kBF16, shape}}}, {});
      ASSERT_TRUE(problem.ok()) << problem.status();
      const KernelConfig heuristic = cpu.Heuristic(**problem, CpuDevice(threads));
      EXPECT_EQ(heuristic, cpu.Heuristic(**problem, CpuDevice(threads)));
      EXPECT_TRUE(cpu.IsCandidate(heuristic, **problem, CpuDevice(threads)))
          << heuristic.DebugString();
      EXPECT_TRUE(cpu.CheckConfig(heuristic, **problem, CpuDevice(threads)).ok());
      EXPECT_EQ(heuristic.Named("threads"), shape.size() == 1 ? 1 : threads);
    }
  }
}

// An empty x declares dims no bytes back: nothing is sized from them.
TEST(ExampleKernelTest, EmptyXWithHugeDimsSizesNothingFromThem) {
  const std::unique_ptr<Kernel> kernel = MakeExampleKernel();
  constexpr int64_t kHuge = int64_t{1} << 40;
  for (const Shape& shape : {Shape{0, kHuge}, Shape{kHuge, kHuge, 0}, Shape{0}}) {
    absl::StatusOr<TensorMap> out =
        RunOnCpu(*kernel, {{"x", Tensor::Zeros(DType::kF32, shape)}}, {}, KernelConfig{});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->at("out").shape(), shape);
  }
}

TEST(ExampleKernelTest, BadCallsAreInvalidArgumentNamingWhatIsWrong) {
  const std::unique_ptr<Kernel> kernel = MakeExampleKernel();
  const Tensor x = RandomTensor(DType::kF16, {3, 5}, 9);
  KernelConfig gpu_field;
  gpu_field.block_q = 64;
  KernelConfig cuda;
  cuda.platform = "cuda";
  KernelConfig too_many_threads;
  too_many_threads.named["threads"] = 5000;
  KernelConfig old_threads;  // num_warps meant the CPU's threads before config schema 2
  old_threads.num_warps = 2;
  KernelConfig unknown;
  unknown.named["lanes"] = 4;
  struct Case {
    TensorMap inputs;
    Attributes params;
    KernelConfig config;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"x", x}, {"weight", RandomTensor(DType::kF16, {4}, 1)}},
       {},
       {},
       "input 'weight': expected shape [H] = [5], got [4]"},
      {{{"x", x}, {"weight", RandomTensor(DType::kF32, {5}, 1)}},
       {},
       {},
       "input 'weight': expected dtype f16 (x's), got f32"},
      {{{"x", x}},
       {{"eps", 0.0}},
       {},
       "param 'eps' = 0 is out of range: expected 1e-12..1 (added to the mean square)"},
      {{{"x", x}}, {{"epsilon", 0.1}}, {}, "unknown param 'epsilon' of rms_norm: expected eps"},
      {{{"x", x}},
       {},
       gpu_field,
       "config block_q=64: block_q is not a field of rms_norm on cpu (its fields: block_size, "
       "threads)"},
      {{{"x", x}},
       {},
       too_many_threads,
       "config threads=5000 is out of range for rms_norm on cpu: expected 0..1024"},
      {{{"x", x}},
       {},
       old_threads,
       "config num_warps=2: num_warps is not a field of rms_norm on cpu; the field for the cpu "
       "platform's worker threads is 'threads' (0..1024)"},
      {{{"x", x}},
       {},
       unknown,
       "config 'lanes'=4: not a field of rms_norm on cpu (its fields: block_size, threads)"},
      {{{"x", x}}, {}, cuda, "config platform 'cuda': expected \"cpu\" or \"\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TensorMap> out = RunOnCpu(*kernel, c.inputs, c.params, c.config);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(std::string(out.status().message()), c.message);
  }
  // The schema's own checks come first: a dtype or rank it does not list, a missing x.
  for (const TensorMap& inputs : {TensorMap{{"x", RandomTensor(DType::kI32, {3}, 2)}},
                                  TensorMap{{"x", RandomTensor(DType::kF32, {1, 1, 1, 1, 2}, 3)}},
                                  TensorMap{{"weight", RandomTensor(DType::kF32, {2}, 4)}}}) {
    absl::StatusOr<TensorMap> out = RunOnCpu(*kernel, inputs, {}, KernelConfig{});
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  }
}

}  // namespace
}  // namespace kernelserve::testing
