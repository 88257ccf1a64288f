#include "client/cli/call_spec.h"

#include "client/cli/cli.h"
#include "client/cli/parser.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

Args ArgsOf(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
  EXPECT_TRUE(line.ok()) << line.status();
  return line.ok() ? line->args : Args{};
}

CallSpec SpecOf(const std::vector<std::string>& argv) {
  absl::StatusOr<CallSpec> spec = CallSpecFromArgs(ArgsOf(argv));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(CallSpec{});
}

absl::StatusCode SpecError(const std::vector<std::string>& argv) {
  return CallSpecFromArgs(ArgsOf(argv)).status().code();
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

TEST(CallSpecTest, DataSizeIsCheckedFromTheShapesAlone) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(CheckDataSize(SpecOf({"run", "k", "--shape=x=f32:2,3", "--values=c=i32:0,2"}), kGiB)
                .value(),
            2 * 3 * 4 + 2 * 4);
  absl::Status big = CheckDataSize(SpecOf({"run", "k", "--shape=x=f32:1024,1024,1024"}), kGiB)
                         .status();  // 4 GiB: never allocated
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("input x: f32[1024,1024,1024] is 4 GiB (4294967296 bytes); a "
                               "request may carry at most 1 GiB (1073741824 bytes"),
            std::string::npos)
      << big;
  absl::Status overflow =
      CheckDataSize(SpecOf({"run", "k", "--shape=x=bf16:4294967296,4294967296,2"}), kGiB).status();
  EXPECT_EQ(overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.message().find("more bytes than 2^63"), std::string::npos) << overflow;
  absl::Status together =
      CheckDataSize(SpecOf({"run", "k", "--shape=x=f32:100", "--shape=y=f32:100"}), 600).status();
  EXPECT_NE(together.message().find("the inputs are 800 bytes together"), std::string::npos)
      << together;
}

TEST(CallSpecTest, Errors) {
  EXPECT_EQ(CallSpecFromArgs(Args{{"run"}, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CallSpecFromArgs(Args{{"run", "a", "b"}, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
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

// A client whose server is not there: ListKernels fails at once and params go typed by their
// text.
std::unique_ptr<Client> NoServer() {
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.deadline = absl::Milliseconds(500);
  return *Client::Connect(options);
}

// The schema of a kernel as ListKernels gives it, for params of these types.
v1::KernelInfo Schema(const std::string& name,
                      const std::vector<std::pair<std::string, std::string>>& params) {
  v1::KernelInfo info;
  info.set_name(name);
  for (const auto& [param, type] : params) {
    v1::ParamInfo* p = info.add_param_schema();
    p->set_name(param);
    p->set_type(type);
  }
  return info;
}

TEST(CallSpecTest, FillsExecuteRequest) {
  CallSpec spec = SpecOf({"run", "flash_attention", "--shape=q=f32:1,4,2,8", "--param=causal=true",
                          "--param=softmax_scale=0.5", "--param=window_left=3", "--device=0"});
  v1::ExecuteRequest request;
  ASSERT_TRUE(FillRequest(spec, *NoServer(), /*with_data=*/true, &request).ok());
  EXPECT_EQ(request.kernel(), "flash_attention");
  const auto& p = request.parameters();
  EXPECT_TRUE(p.at("causal").bool_value());
  EXPECT_EQ(p.at("softmax_scale").double_value(), 0.5);
  EXPECT_EQ(p.at("window_left").int64_value(), 3);
  EXPECT_FALSE(p.contains("window_right"));
  EXPECT_EQ(request.device(), 0);
  const v1::Tensor& q = request.inputs().at("q");
  EXPECT_EQ(q.dtype(), v1::DTYPE_F32);
  EXPECT_EQ(q.data().size(), 1u * 4 * 2 * 8 * 4);
}

TEST(CallSpecTest, ShapesOnlyRequestCarriesNoData) {
  CallSpec spec = SpecOf({"tune", "mean_pooling", "--shape=x=bf16:2,64,32",
                          "--values=cu_seqlens=i32:0,64", "--param=chunk_size=16"});
  v1::AutotuneRequest request;
  ASSERT_TRUE(FillRequest(spec, *NoServer(), /*with_data=*/false, &request).ok());
  EXPECT_EQ(request.parameters().at("chunk_size").int64_value(), 16);
  const v1::Tensor& x = request.inputs().at("x");
  EXPECT_EQ(x.dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(std::vector<int64_t>(x.shape().begin(), x.shape().end()),
            (std::vector<int64_t>{2, 64, 32}));
  EXPECT_TRUE(x.data().empty());
  EXPECT_EQ(request.inputs().at("cu_seqlens").data().size(), 8u);
  EXPECT_FALSE(request.has_device());
}

// With the kernel's schema, params are typed by it, and a wrong one is named with the
// kernel's params.
TEST(CallSpecTest, ParamsAreTypedByTheSchema) {
  const v1::KernelInfo info = Schema(
      "flash_attention", {{"causal", "bool"}, {"softmax_scale", "float"}, {"window_left", "int"}});
  absl::StatusOr<Attributes> params =
      ParamsFromText({{"causal", "1"}, {"softmax_scale", "2"}, {"window_left", "7"}}, &info);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->at("causal"), AttrValue(true));
  EXPECT_EQ(params->at("softmax_scale"), AttrValue(2.0));
  EXPECT_EQ(params->at("window_left"), AttrValue(int64_t{7}));
  absl::Status unknown = ParamsFromText({{"chunk_size", "4"}}, &info).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(),
            "--param chunk_size: not a param of flash_attention: expected causal, "
            "softmax_scale, window_left");
  EXPECT_EQ(ParamsFromText({{"window_left", "wide"}}, &info).status().message(),
            "--param window_left='wide': expected an integer");
  // Without a schema the text decides.
  params = ParamsFromText({{"a", "true"}, {"b", "3"}, {"c", "0.5"}, {"d", "text"}}, nullptr);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->at("a"), AttrValue(true));
  EXPECT_EQ(params->at("b"), AttrValue(int64_t{3}));
  EXPECT_EQ(params->at("c"), AttrValue(0.5));
  EXPECT_EQ(params->at("d"), AttrValue(std::string("text")));
}

}  // namespace
}  // namespace kernelserve::cli
