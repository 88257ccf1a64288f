#include "kernels/mean_pooling/mean_pooling_kernel.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::testing::HasSubstr;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

// Runs the kernel's CPU implementation the way the executor does; its one output `out`.
absl::StatusOr<Tensor> RunCpu(const Kernel& kernel, const TensorMap& inputs,
                              const Attributes& attrs, const KernelConfig& config) {
  absl::StatusOr<TensorMap> outputs =
      ::kernelserve::testing::RunOnCpu(kernel, inputs, attrs, config);
  if (!outputs.ok()) return outputs.status();
  if (outputs->size() != 1 || !outputs->contains("out")) return absl::InternalError("outputs");
  return outputs->at("out");
}

// float64 mean pooling of x [rows,H] over the row ranges [cu[n], cu[n+1]), skipping rows
// whose `keep` entry is 0 (when keep is not empty).
std::vector<double> Reference(const Tensor& x, const std::vector<int64_t>& cu,
                              const std::vector<int64_t>& keep) {
  const int64_t h_count = x.dim(x.rank() - 1);
  const std::vector<double> values = x.ToDoubles();
  std::vector<double> out;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    std::vector<double> sum(static_cast<size_t>(h_count), 0.0);
    int64_t count = 0;
    for (int64_t r = cu[n]; r < cu[n + 1]; ++r) {
      if (!keep.empty() && keep[static_cast<size_t>(r)] == 0) continue;
      ++count;
      for (int64_t h = 0; h < h_count; ++h) sum[h] += values[r * h_count + h];
    }
    for (double s : sum) out.push_back(count == 0 ? 0.0 : s / count);
  }
  return out;
}

TEST(MeanPoolingKernelTest, IdentityAndSchema) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  EXPECT_EQ(kernel->id(), "mean_pooling@v1");
  ASSERT_NE(kernel->impl(Platform::kCpu), nullptr);
  EXPECT_EQ(kernel->impl(Platform::kCpu)->platform(), Platform::kCpu);
  const KernelSchema& schema = kernel->schema();
  std::set<std::string> inputs;
  for (const InputSchema& input : schema.inputs) {
    inputs.insert(input.name);
    EXPECT_FALSE(input.doc.empty()) << input.name;
    EXPECT_FALSE(input.dtypes.empty()) << input.name;
  }
  EXPECT_EQ(inputs, (std::set<std::string>{"x", "mask", "cu_seqlens"}));
  ASSERT_EQ(schema.outputs.size(), 1u);
  EXPECT_EQ(schema.outputs[0].name, "out");
  ASSERT_EQ(schema.params.size(), 1u);
  EXPECT_EQ(schema.params[0].name, "chunk_size");
  EXPECT_EQ(schema.params[0].default_value, AttrValue(int64_t{32}));
}

TEST(MeanPoolingKernelTest, AcceptsEveryForm) {
  MeanPoolingKernel kernel;
  const std::vector<TensorSpecMap> ok = {
      {{"x", Spec(DType::kF32, {2, 5, 3})}},
      {{"x", Spec(DType::kBF16, {2, 5, 3})}, {"mask", Spec(DType::kBool, {2, 5})}},
      {{"x", Spec(DType::kF16, {2, 5, 3})}, {"mask", Spec(DType::kI32, {2, 5})}},
      {{"x", Spec(DType::kF32, {2, 5, 3})}, {"mask", Spec(DType::kI64, {2, 5})}},
      {{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {4})}},
      {{"x", Spec(DType::kF16, {1, 9, 3})}, {"cu_seqlens", Spec(DType::kI64, {1})}}};
  for (const TensorSpecMap& inputs : ok) EXPECT_TRUE(AnalyzeCall(kernel, inputs, {}).ok());
  EXPECT_TRUE(AnalyzeCall(kernel, ok[0], {{"chunk_size", int64_t{7}}}).ok());
}

struct BadCase {
  TensorSpecMap inputs;
  Attributes attrs;
  std::string substring;
};

TEST(MeanPoolingKernelTest, AnalysisNamesEveryWrongInput) {
  MeanPoolingKernel kernel;
  const TensorSpec x = Spec(DType::kF32, {2, 5, 3});
  const std::vector<BadCase> cases = {
      {{{"x", x}, {"y", x}}, {}, "'y'"},
      {{{"mask", Spec(DType::kBool, {2, 5})}}, {}, "missing input 'x'"},
      {{{"x", Spec(DType::kI32, {2, 5, 3})}}, {}, "input 'x': dtype i32: expected f32|f16|bf16"},
      {{{"x", Spec(DType::kF32, {10, 3})}}, {}, "input 'x': expected rank 3"},
      {{{"x", Spec(DType::kF32, {1, 2, 5, 3})}}, {}, "input 'x': [1,2,5,3] has rank 4"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {2, 4})}}, {}, "input 'mask': expected shape"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {10})}}, {}, "input 'mask': [10] has rank 1"},
      {{{"x", x}, {"mask", Spec(DType::kF32, {2, 5})}}, {}, "input 'mask': dtype f32"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {2, 2})}},
       {},
       "input 'cu_seqlens': [2,2] has rank 2"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {0})}},
       {},
       "input 'cu_seqlens': expected rank 1"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kF32, {3})}},
       {},
       "input 'cu_seqlens': dtype f32: expected i32|i64"},
      {{{"x", x}, {"cu_seqlens", Spec(DType::kI32, {3})}}, {}, "input 'x': with cu_seqlens"},
      {{{"x", Spec(DType::kF32, {9})}, {"cu_seqlens", Spec(DType::kI32, {3})}},
       {},
       "input 'x': [9] has rank 1"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {2, 5})}, {"cu_seqlens", Spec(DType::kI32, {3})}},
       {},
       "'mask' and 'cu_seqlens'"},
      {{{"x", x}}, {{"chunk_size", int64_t{0}}}, "param 'chunk_size' = 0 is out of range"},
      {{{"x", x}}, {{"chunk_size", int64_t{-4}}}, "param 'chunk_size' = -4 is out of range"},
      {{{"x", x}}, {{"chunk_size", true}}, "param 'chunk_size': expected int, got a bool"},
      {{{"x", x}}, {{"chunk", int64_t{4}}}, "unknown param 'chunk'"}};
  for (const BadCase& c : cases) {
    const absl::Status status = AnalyzeCall(kernel, c.inputs, c.attrs).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.substring;
    EXPECT_THAT(status.message(), HasSubstr(c.substring));
  }
}

TEST(MeanPoolingKernelTest, ValidateDataChecksOffsets) {
  MeanPoolingKernel kernel;
  const Tensor x = RandomTensor(DType::kF32, {9, 3}, 1);
  for (const std::vector<int64_t>& cu :
       std::vector<std::vector<int64_t>>{{1, 4, 9}, {0, 5, 4}, {0, 4, 10}}) {
    for (DType dtype : {DType::kI32, DType::kI64}) {
      const TensorMap inputs = {{"x", x}, {"cu_seqlens", Tensor::FromInts(dtype, {3}, cu)}};
      auto problem = AnalyzeCall(kernel, SpecsOf(inputs), {});
      ASSERT_TRUE(problem.ok()) << problem.status();
      const absl::Status status = kernel.ValidateData(**problem, inputs);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << cu[0] << cu[1] << cu[2];
      EXPECT_THAT(status.message(), HasSubstr("cu_seqlens"));
    }
  }
  const TensorMap good = {{"x", x}, {"cu_seqlens", Tensor::FromInts(DType::kI32, {3}, {0, 0, 9})}};
  EXPECT_TRUE(kernel.ValidateData(**AnalyzeCall(kernel, SpecsOf(good), {}), good).ok());
  const TensorMap dense = {{"x", RandomTensor(DType::kF32, {2, 4, 3}, 2)}};
  EXPECT_TRUE(kernel.ValidateData(**AnalyzeCall(kernel, SpecsOf(dense), {}), dense).ok());
}

TEST(MeanPoolingKernelTest, OutputSpecs) {
  MeanPoolingKernel kernel;
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, {{"x", Spec(DType::kBF16, {3, 7, 17})}}, {})),
            (TensorSpecMap{{"out", Spec(DType::kBF16, {3, 17})}}));
  const TensorSpecMap varlen = {{"x", Spec(DType::kF16, {1, 20, 5})},
                                {"cu_seqlens", Spec(DType::kI64, {4})}};
  EXPECT_EQ(kernel.OutputSpecs(**AnalyzeCall(kernel, varlen, {})),
            (TensorSpecMap{{"out", Spec(DType::kF16, {3, 5})}}));
}

TEST(MeanPoolingKernelTest, CpuRunMatchesReferenceInEveryForm) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  uint64_t seed = 10;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const double tolerance = dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 5e-3 : 1e-2;
    SCOPED_TRACE(DTypeName(dtype));
    // Dense [3,7,17].
    const Tensor x = RandomTensor(dtype, {3, 7, 17}, seed++);
    absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, {}, KernelConfig{});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->spec(), Spec(dtype, {3, 17}));
    EXPECT_LT(RelativeError(out->ToDoubles(), Reference(x, {0, 7, 14, 21}, {})), tolerance);
    // Masked, with each mask dtype.
    for (DType mask_dtype : {DType::kBool, DType::kI32, DType::kI64}) {
      std::vector<int64_t> keep = RandomTensor(DType::kBool, {21}, seed++).ToInts();
      std::fill(keep.begin() + 7, keep.begin() + 14, 0);  // sequence 1 fully masked
      if (mask_dtype != DType::kBool) keep[0] = 5;        // any nonzero value counts
      const Tensor mask = Tensor::FromInts(mask_dtype, {3, 7}, keep);
      out = RunCpu(*kernel, {{"x", x}, {"mask", mask}}, {}, KernelConfig{});
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_LT(RelativeError(out->ToDoubles(), Reference(x, {0, 7, 14, 21}, keep)), tolerance);
      for (int64_t h = 17; h < 34; ++h) EXPECT_EQ(out->GetFloat(h), 0.0f);
    }
    // Varlen [T,H] and [1,T,H] with I32 and I64 offsets, a zero-length sequence included.
    const std::vector<int64_t> cu = {0, 3, 3, 40, 129};
    const Tensor packed = RandomTensor(dtype, {130, 9}, seed++);
    for (DType cu_dtype : {DType::kI32, DType::kI64}) {
      for (bool leading_one : {false, true}) {
        Tensor xs = packed;
        if (leading_one) xs = *Tensor::FromBytes(dtype, {1, 130, 9}, std::string(packed.bytes()));
        out = RunCpu(*kernel, {{"x", xs}, {"cu_seqlens", Tensor::FromInts(cu_dtype, {5}, cu)}}, {},
                     KernelConfig{});
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(out->shape(), (Shape{4, 9}));
        EXPECT_LT(RelativeError(out->ToDoubles(), Reference(packed, cu, {})), tolerance);
        for (int64_t h = 9; h < 18; ++h) EXPECT_EQ(out->GetFloat(h), 0.0f);
      }
    }
  }
}

// Shapes-only tuning makes up valid data: cu_seqlens that cover x.
TEST(MeanPoolingKernelTest, SynthesizedInputsAreValid) {
  MeanPoolingKernel kernel;
  const TensorSpecMap specs = {{"x", Spec(DType::kF32, {1, 100, 4})},
                               {"cu_seqlens", Spec(DType::kI32, {8})}};
  auto problem = AnalyzeCall(kernel, specs, {});
  ASSERT_TRUE(problem.ok());
  absl::StatusOr<TensorMap> inputs = kernel.SynthesizeInputs(**problem, specs, 3);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(SpecsOf(*inputs), specs);
  EXPECT_TRUE(kernel.ValidateData(**problem, *inputs).ok());
  EXPECT_EQ(inputs->at("cu_seqlens").ToInts().back(), 100);
}

}  // namespace
}  // namespace kernelserve
