// mean_pooling_bwd on the CPU: against finite differences of the CPU forward, against its
// closed form, every element written, the same bits for every config.
#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::CpuDevice;
using ::kernelserve::testing::RunOnCpu;

// One call of the contract: forward inputs (x with data) and dout.
struct Call {
  std::string name;
  TensorMap forward;  // x, and mask or cu_seqlens
  Tensor dout;
};

std::vector<Call> Calls(DType dtype) {
  std::vector<Call> calls;
  calls.push_back(
      {"dense", {{"x", RandomTensor(dtype, {3, 5, 6}, 11)}}, RandomTensor(dtype, {3, 6}, 12)});
  // Sequence 1 has no counted row; sequence 2 one.
  calls.push_back(
      {"masked",
       {{"x", RandomTensor(dtype, {3, 4, 5}, 13)},
        {"mask", Tensor::FromInts(DType::kI32, {3, 4}, {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 7, 0})}},
       RandomTensor(dtype, {3, 5}, 14)});
  // Sequences of 3, 0 and 4 rows; rows 7..8 belong to none.
  calls.push_back({"varlen",
                   {{"x", RandomTensor(dtype, {9, 7}, 15)},
                    {"cu_seqlens", Tensor::FromInts(DType::kI64, {4}, {0, 3, 3, 7})}},
                   RandomTensor(dtype, {3, 7}, 16)});
  calls.push_back({"varlen [1,T,H]",
                   {{"x", RandomTensor(dtype, {1, 6, 8}, 17)},
                    {"cu_seqlens", Tensor::FromInts(DType::kI32, {3}, {0, 1, 6})}},
                   RandomTensor(dtype, {2, 8}, 18)});
  return calls;
}

// The backward's inputs for `call`: dout, x shape-only, and the forward's mask or offsets.
TensorMap BwdInputs(const Call& call) {
  TensorMap inputs = call.forward;
  const Tensor& x = call.forward.at("x");
  inputs["x"] = Tensor::ShapeOnly(x.dtype(), x.shape());
  inputs["dout"] = call.dout;
  return inputs;
}

Tensor RunBwd(const TensorMap& inputs, const KernelConfig& config) {
  absl::StatusOr<TensorMap> out = RunOnCpu(*MakeMeanPoolingBwd(), inputs, {}, config);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->at("dx") : Tensor();
}

// sum(dout * mean_pooling(x)) in double.
double Loss(const TensorMap& forward, const Tensor& dout) {
  absl::StatusOr<TensorMap> out = RunOnCpu(*MakeMeanPooling(), forward, {}, KernelConfig{});
  EXPECT_TRUE(out.ok()) << out.status();
  const std::vector<double> o = out->at("out").ToDoubles();
  const std::vector<double> d = dout.ToDoubles();
  double loss = 0.0;
  for (size_t i = 0; i < o.size(); ++i) loss += o[i] * d[i];
  return loss;
}

TEST(MeanPoolingBwdCpuTest, MatchesFiniteDifferencesOfTheForward) {
  // The forward is linear in x: a large step leaves only float rounding in the difference.
  constexpr float kStep = 0.25f;
  for (const Call& call : Calls(DType::kF32)) {
    SCOPED_TRACE(call.name);
    const std::vector<double> dx = RunBwd(BwdInputs(call), KernelConfig{}).ToDoubles();
    const Tensor& x = call.forward.at("x");
    std::vector<double> numeric(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      TensorMap plus = call.forward, minus = call.forward;
      plus["x"].SetFloat(i, x.GetFloat(i) + kStep);
      minus["x"].SetFloat(i, x.GetFloat(i) - kStep);
      numeric[static_cast<size_t>(i)] =
          (Loss(plus, call.dout) - Loss(minus, call.dout)) / (2.0 * kStep);
    }
    const AllCloseResult close = AllClose(dx, numeric, /*rtol=*/1e-5, /*atol=*/1e-5);
    EXPECT_TRUE(close.ok) << close.message;
  }
}

// dx by the contract in float64: dout / count on counted rows, else 0.
std::vector<double> ClosedForm(const Call& call) {
  const Tensor& x = call.forward.at("x");
  const int64_t h_count = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / h_count;
  const int64_t seqs = call.dout.dim(0);
  std::vector<int64_t> cu, keep(static_cast<size_t>(rows), 1);
  if (auto it = call.forward.find("cu_seqlens"); it != call.forward.end()) {
    cu = it->second.ToInts();
    for (int64_t r = cu.back(); r < rows; ++r) keep[static_cast<size_t>(r)] = 0;
  } else {
    for (int64_t n = 0; n <= seqs; ++n) cu.push_back(n * (rows / seqs));
  }
  if (auto it = call.forward.find("mask"); it != call.forward.end()) {
    keep = it->second.ToInts();
  }
  const std::vector<double> dout = call.dout.ToDoubles();
  std::vector<double> dx(static_cast<size_t>(rows * h_count), 0.0);
  for (int64_t n = 0; n < seqs; ++n) {
    int64_t count = 0;
    for (int64_t r = cu[n]; r < cu[n + 1]; ++r) count += keep[static_cast<size_t>(r)] != 0;
    for (int64_t r = cu[n]; r < cu[n + 1]; ++r) {
      if (keep[static_cast<size_t>(r)] == 0) continue;
      for (int64_t h = 0; h < h_count; ++h) dx[r * h_count + h] = dout[n * h_count + h] / count;
    }
  }
  return dx;
}

TEST(MeanPoolingBwdCpuTest, EqualsTheClosedFormInEveryDtype) {
  // f32: the float quotient is the float64 one rounded, exactly. f16/bf16: rounded again, so
  // within one unit in the last place of the dtype.
  const struct {
    DType dtype;
    double rtol;
  } kDtypes[] = {{DType::kF32, 0.0}, {DType::kF16, 1.0 / 1024}, {DType::kBF16, 1.0 / 128}};
  for (const auto& [dtype, rtol] : kDtypes) {
    for (const Call& call : Calls(dtype)) {
      SCOPED_TRACE(call.name + " " + std::string(DTypeName(dtype)));
      const Tensor dx = RunBwd(BwdInputs(call), KernelConfig{});
      std::vector<double> want = ClosedForm(call);
      if (dtype == DType::kF32) {
        for (double& w : want) w = static_cast<float>(w);
      }
      const AllCloseResult close = AllClose(dx.ToDoubles(), want, rtol, 0.0);
      EXPECT_TRUE(close.ok) << close.message;
    }
  }
}

TEST(MeanPoolingBwdCpuTest, WritesEveryElementWithTheSameBitsForEveryConfig) {
  for (const Call& call : Calls(DType::kBF16)) {
    SCOPED_TRACE(call.name);
    const Tensor want = RunBwd(BwdInputs(call), KernelConfig{});
    for (int rows : {1, 2, 64, 512}) {
      for (int threads : {1, 3}) {
        KernelConfig config;
        config.block_size = rows;
        config.named["threads"] = threads;
        // The raw kernel on a poisoned dx: every element must be overwritten.
        Tensor dx = Tensor::Empty(want.dtype(), want.shape());
        for (int64_t i = 0; i < dx.numel(); ++i) {
          dx.SetFloat(i, std::numeric_limits<float>::quiet_NaN());
        }
        const Tensor& x = call.forward.at("x");
        cpu::MeanPoolingBwdArgs args;
        args.dtype = x.dtype();
        args.dout = call.dout.data();
        args.dx = dx.data();
        args.hidden = x.dim(x.rank() - 1);
        args.total_rows = x.numel() / args.hidden;
        args.num_sequences = call.dout.dim(0);
        std::vector<int64_t> cu;
        std::vector<uint8_t> mask;
        if (auto it = call.forward.find("cu_seqlens"); it != call.forward.end()) {
          cu = it->second.ToInts();
          args.cu_seqlens = cu.data();
        } else {
          args.seq_len = x.dim(1);
        }
        if (auto it = call.forward.find("mask"); it != call.forward.end()) {
          for (int64_t m : it->second.ToInts()) mask.push_back(m != 0 ? 1 : 0);
          args.mask = mask.data();
        }
        ASSERT_TRUE(cpu::MeanPoolingBwdCpu(args, config).ok());
        EXPECT_EQ(dx.bytes(), want.bytes()) << rows << " rows, " << threads << " threads";
      }
    }
  }
}

TEST(MeanPoolingBwdCpuTest, RefusesConfigsOutsideItsLimits) {
  KernelConfig config;
  config.block_q = 64;
  EXPECT_EQ(cpu::CheckMeanPoolingBwdCpuConfig(config).code(), absl::StatusCode::kInvalidArgument);
  config = KernelConfig{};
  config.platform = "cuda";
  EXPECT_EQ(cpu::CheckMeanPoolingBwdCpuConfig(config).code(), absl::StatusCode::kInvalidArgument);
  config = KernelConfig{};
  config.named["threads"] = -1;
  EXPECT_EQ(cpu::CheckMeanPoolingBwdCpuConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

// The run's last fetch (the executor's) moves dx out, so that a large dx is held once: the same
// bytes as Fetch gives, and nothing to fetch after it.
TEST(MeanPoolingBwdCpuTest, TakeOutputsMovesDxOut) {
  const std::unique_ptr<Kernel> kernel = MakeMeanPoolingBwd();
  const TensorMap inputs = BwdInputs(Calls(DType::kF32)[0]);
  auto problem = AnalyzeCall(*kernel, SpecsOf(inputs), {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  const PlatformImpl* impl = kernel->impl(Platform::kCpu);
  ASSERT_NE(impl, nullptr);
  absl::StatusOr<std::unique_ptr<PreparedRun>> run = impl->Prepare(**problem, inputs, CpuDevice(2));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE((*run)->Launch(impl->Heuristic(**problem, CpuDevice(2))).ok());
  absl::StatusOr<TensorMap> fetched = (*run)->Fetch();
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  absl::StatusOr<TensorMap> taken = (*run)->TakeOutputs({});
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->at("dx").bytes(), fetched->at("dx").bytes());
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kernelserve
