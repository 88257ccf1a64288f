#include "kernels/mean_pooling/mean_pooling_bwd_kernel.h"

#include <string>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::testing::HasSubstr;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

absl::Status AnalyzeStatus(const TensorSpecMap& specs) {
  return AnalyzeCall(*MakeMeanPoolingBwd(), specs, {}).status();
}

TEST(MeanPoolingBwdKernelTest, SchemaDeclaresThePair) {
  std::unique_ptr<Kernel> bwd = MakeMeanPoolingBwd();
  EXPECT_EQ(bwd->id(), "mean_pooling_bwd@v1");
  EXPECT_EQ(bwd->schema().vjp_of, "mean_pooling");
  EXPECT_EQ(MakeMeanPooling()->schema().vjp, "mean_pooling_bwd");
  const InputSchema* x = bwd->schema().FindInput("x");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(x->shape_only);
  EXPECT_FALSE(bwd->schema().FindInput("dout")->shape_only);
  EXPECT_NE(bwd->impl(Platform::kCpu), nullptr);
}

TEST(MeanPoolingBwdKernelTest, OutputIsShapedAsX) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingBwd();
  struct Case {
    TensorSpecMap specs;
    Shape dx;
  };
  const std::vector<Case> cases = {
      {{{"dout", Spec(DType::kF16, {3, 8})}, {"x", Spec(DType::kF16, {3, 5, 8})}}, {3, 5, 8}},
      {{{"dout", Spec(DType::kF32, {2, 4})},
        {"x", Spec(DType::kF32, {7, 4})},
        {"cu_seqlens", Spec(DType::kI32, {3})}},
       {7, 4}},
      {{{"dout", Spec(DType::kBF16, {2, 4})},
        {"x", Spec(DType::kBF16, {1, 7, 4})},
        {"cu_seqlens", Spec(DType::kI64, {3})}},
       {1, 7, 4}},
      {{{"dout", Spec(DType::kF32, {2, 4})},
        {"x", Spec(DType::kF32, {2, 6, 4})},
        {"mask", Spec(DType::kBool, {2, 6})}},
       {2, 6, 4}}};
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const Problem>> problem = AnalyzeCall(*kernel, c.specs, {});
    ASSERT_TRUE(problem.ok()) << problem.status();
    const TensorSpecMap out = kernel->OutputSpecs(**problem);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out.at("dx").shape, c.dx);
    EXPECT_EQ(out.at("dx").dtype, c.specs.at("x").dtype);
  }
}

TEST(MeanPoolingBwdKernelTest, BadInputsNameWhatIsWrong) {
  const TensorSpec x = Spec(DType::kF32, {3, 5, 8});
  struct Case {
    TensorSpecMap specs;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"dout", Spec(DType::kF32, {3, 7})}, {"x", x}},
       "input 'dout': expected the forward's out [B,H] = [3,8]"},
      {{{"dout", Spec(DType::kF32, {2, 8})}, {"x", x}}, "got [2,8]"},
      {{{"dout", Spec(DType::kF16, {3, 8})}, {"x", x}},
       "input 'dout': dtype f16: expected x's f32"},
      {{{"dout", Spec(DType::kF32, {3, 8})}}, "missing input 'x'"},
      {{{"x", x}}, "missing input 'dout'"},
      {{{"dout", Spec(DType::kF32, {3, 8})}, {"x", x}, {"mask", Spec(DType::kBool, {3, 4})}},
       "input 'mask'"},
      {{{"dout", Spec(DType::kF32, {3, 8})},
        {"x", Spec(DType::kF32, {9, 8})},
        {"cu_seqlens", Spec(DType::kI32, {3})}},
       "input 'dout': expected the forward's out [N,H] = [2,8]"},
      {{{"dout", Spec(DType::kF32, {3, 8})},
        {"x", x},
        {"mask", Spec(DType::kBool, {3, 5})},
        {"cu_seqlens", Spec(DType::kI32, {4})}},
       "both given"}};
  for (const Case& c : cases) {
    const absl::Status status = AnalyzeStatus(c.specs);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.says));
  }
  const absl::Status param =
      AnalyzeCall(*MakeMeanPoolingBwd(), {{"dout", Spec(DType::kF32, {3, 8})}, {"x", x}},
                  {{"chunk_size", int64_t{4}}})
          .status();
  EXPECT_EQ(param.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(param.message()), HasSubstr("unknown param 'chunk_size'"));
}

TEST(MeanPoolingBwdKernelTest, OnlyShapeOnlyInputsMayComeWithoutData) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingBwd();
  const TensorMap shape_only_x = {{"dout", RandomTensor(DType::kF32, {2, 4}, 1)},
                                  {"x", Tensor::ShapeOnly(DType::kF32, {2, 3, 4})}};
  EXPECT_TRUE(kernel->schema().CheckInputData(shape_only_x).ok());
  const TensorMap no_dout = {{"dout", Tensor::ShapeOnly(DType::kF32, {2, 4})},
                             {"x", Tensor::ShapeOnly(DType::kF32, {2, 3, 4})}};
  const absl::Status status = kernel->schema().CheckInputData(no_dout);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("input 'dout'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("32 bytes"));
  // The forward reads x: a shape-only x is refused there.
  const absl::Status forward = MakeMeanPooling()->schema().CheckInputData(
      {{"x", Tensor::ShapeOnly(DType::kF32, {2, 3, 4})}});
  EXPECT_EQ(forward.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(forward.message()), HasSubstr("input 'x'"));
}

TEST(MeanPoolingBwdKernelTest, SynthesizedInputsLeaveXWithoutData) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingBwd();
  const TensorSpecMap specs = {{"dout", Spec(DType::kF32, {3, 4})},
                               {"x", Spec(DType::kF32, {10, 4})},
                               {"cu_seqlens", Spec(DType::kI64, {4})}};
  absl::StatusOr<std::shared_ptr<const Problem>> problem = AnalyzeCall(*kernel, specs, {});
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<TensorMap> inputs = kernel->SynthesizeInputs(**problem, specs, 7);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_FALSE(inputs->at("x").has_data());
  EXPECT_TRUE(inputs->at("dout").has_data());
  EXPECT_EQ(inputs->at("cu_seqlens").ToInts(), (std::vector<int64_t>{0, 3, 6, 10}));
  EXPECT_TRUE(kernel->ValidateData(**problem, *inputs).ok());
}

}  // namespace
}  // namespace kernelserve
