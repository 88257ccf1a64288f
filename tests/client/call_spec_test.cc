#include "client/cli/call_spec.h"

#include "client/cli/cli.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

CallSpec SpecOf(const std::vector<std::string>& argv) {
  absl::StatusOr<Args> args = ParseArgs(argv, AllFlags());
  EXPECT_TRUE(args.ok()) << args.status();
  absl::StatusOr<CallSpec> spec = CallSpecFromArgs(*args);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(CallSpec{});
}

absl::StatusCode SpecError(const std::vector<std::string>& argv) {
  return CallSpecFromArgs(ParseArgs(argv, AllFlags()).value()).status().code();
}

TEST(CallSpecTest, ReadsEveryFlag) {
  CallSpec spec = SpecOf({"run", "flash_attention", "--shape=q=f16:1,4,2,8",
                          "--values=cu_seqlens_q=i32:0,4", "--param=causal=true", "--platform=cpu",
                          "--device=-1", "--seed=9", "--config=block_q=16"});
  EXPECT_EQ(spec.kernel, "flash_attention");
  EXPECT_EQ(spec.shapes.at("q"), (TensorSpec{DType::kF16, {1, 4, 2, 8}}));
  EXPECT_EQ(spec.values.at("cu_seqlens_q").ToInts(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(spec.params.at("causal"), "true");
  EXPECT_EQ(spec.platform, "cpu");
  EXPECT_EQ(spec.device, -1);
  EXPECT_EQ(spec.seed, 9u);
  EXPECT_EQ(spec.config->block_q, 16);
}

TEST(CallSpecTest, Errors) {
  EXPECT_EQ(SpecError({"run"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecError({"run", "a", "b"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecError({"run", "k", "--shape=x=2", "--shape=x=3"}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecError({"run", "k", "--shape=x=2", "--values=x=f32:1"}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecError({"run", "k", "--input=x=/nonexistent/x.npy"}), absl::StatusCode::kNotFound);
  EXPECT_EQ(SpecError({"run", "k", "--device=gpu"}), absl::StatusCode::kInvalidArgument);
}

TEST(CallSpecTest, RandomInputsAreSeededAndValuesKept) {
  CallSpec spec = SpecOf({"run", "mean_pooling", "--shape=x=f32:3,5,4", "--shape=y=f32:3,5,4",
                          "--values=cu_seqlens=i64:0,2,3"});
  TensorMap a = MakeInputs(spec);
  TensorMap b = MakeInputs(spec);
  EXPECT_EQ(a.at("x").bytes(), b.at("x").bytes());
  EXPECT_NE(a.at("x").bytes(), a.at("y").bytes()) << "each input needs its own seed";
  EXPECT_EQ(a.at("x").shape(), (Shape{3, 5, 4}));
  EXPECT_EQ(a.at("cu_seqlens").ToInts(), (std::vector<int64_t>{0, 2, 3}));
  spec.seed = 1;
  EXPECT_NE(MakeInputs(spec).at("x").bytes(), a.at("x").bytes());
}

TEST(CallSpecTest, FillsExecuteRequest) {
  CallSpec spec = SpecOf({"run", "flash_attention", "--shape=q=f32:1,4,2,8", "--param=causal=1",
                          "--param=softmax_scale=0.5", "--param=window_left=3",
                          "--param=return_lse=true", "--param=logits_soft_cap=30", "--device=0"});
  v1::ExecuteRequest request;
  ASSERT_TRUE(FillRequest(spec, /*with_data=*/true, &request).ok());
  EXPECT_EQ(request.kernel(), "flash_attention");
  const v1::FlashAttentionParams& p = request.flash_attention();
  EXPECT_TRUE(p.causal());
  EXPECT_FLOAT_EQ(p.softmax_scale(), 0.5f);
  EXPECT_TRUE(p.has_window_left());
  EXPECT_EQ(p.window_left(), 3);
  EXPECT_FALSE(p.has_window_right());
  EXPECT_TRUE(p.return_lse());
  EXPECT_FLOAT_EQ(p.logits_soft_cap(), 30.0f);
  EXPECT_EQ(request.device(), 0);
  const v1::Tensor& q = request.inputs().at("q");
  EXPECT_EQ(q.dtype(), v1::DTYPE_F32);
  EXPECT_EQ(q.data().size(), 1u * 4 * 2 * 8 * 4);
}

TEST(CallSpecTest, ShapesOnlyRequestCarriesNoData) {
  CallSpec spec = SpecOf({"tune", "mean_pooling", "--shape=x=bf16:2,64,32",
                          "--values=cu_seqlens=i32:0,64", "--param=chunk_size=16"});
  v1::AutotuneRequest request;
  ASSERT_TRUE(FillRequest(spec, /*with_data=*/false, &request).ok());
  EXPECT_EQ(request.mean_pooling().chunk_size(), 16);
  const v1::Tensor& x = request.inputs().at("x");
  EXPECT_EQ(x.dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(std::vector<int64_t>(x.shape().begin(), x.shape().end()),
            (std::vector<int64_t>{2, 64, 32}));
  EXPECT_TRUE(x.data().empty());
  EXPECT_EQ(request.inputs().at("cu_seqlens").data().size(), 8u);
  EXPECT_FALSE(request.has_device());
}

TEST(CallSpecTest, BadParamsNameTheParam) {
  v1::ExecuteRequest request;
  CallSpec unknown = SpecOf({"run", "mean_pooling", "--param=causal=true"});
  absl::Status status = FillRequest(unknown, true, &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("causal"), std::string::npos);
  CallSpec bad_value = SpecOf({"run", "flash_attention", "--param=window_left=wide"});
  EXPECT_EQ(FillRequest(bad_value, true, &request).code(), absl::StatusCode::kInvalidArgument);
  CallSpec other_kernel = SpecOf({"run", "softmax", "--param=axis=1"});
  EXPECT_EQ(FillRequest(other_kernel, true, &request).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve::cli
