// A third kernel (tests/support/toy_kernel.cc) served by a binary that registers it: listed
// with its schema, callable over the wire by its params, checked by its schema, and routed,
// tuned and cached like the built-in ones, with no change to the server or the proto.
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;
using ::testing::HasSubstr;

class ToyKernelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(KERNELSERVE_TOY_SERVER_BINARY);
    absl::Status started = server_->Start({"--cache=memory"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }

  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
    grpc::ClientContext context;
    return stub_->Execute(&context, request, response);
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* ToyKernelTest::server_ = nullptr;

v1::ExecuteRequest ToyRequest(const Tensor& x) {
  v1::ExecuteRequest request;
  request.set_kernel("toy_scale");
  (*request.mutable_inputs())["x"] = ToWire(x);
  return request;
}

TEST_F(ToyKernelTest, ListedWithItsSchema) {
  v1::ListKernelsResponse kernels;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok());
  const v1::KernelInfo* toy = nullptr;
  for (const v1::KernelInfo& k : kernels.kernels()) {
    if (k.name() == "toy_scale") toy = &k;
  }
  ASSERT_NE(toy, nullptr);
  EXPECT_EQ(toy->id(), "toy_scale@v1");
  EXPECT_EQ(toy->params_field(), "");  // no typed params message: params go by name
  ASSERT_EQ(toy->param_schema_size(), 1);
  EXPECT_EQ(toy->param_schema(0).name(), "factor");
  EXPECT_EQ(toy->param_schema(0).type(), "float");
  EXPECT_EQ(toy->param_schema(0).default_value().double_value(), 2.0);
  ASSERT_EQ(toy->input_schema_size(), 1);
  EXPECT_EQ(toy->input_schema(0).dtypes(0), v1::DTYPE_F32);
  EXPECT_EQ(toy->platforms(0), "cpu");
  // A platform without config fields lists an empty config schema.
  ASSERT_EQ(toy->config_schemas_size(), 1);
  EXPECT_EQ(toy->config_schemas(0).platform(), "cpu");
  EXPECT_EQ(toy->config_schemas(0).fields_size(), 0);
}

TEST_F(ToyKernelTest, CallableByItsParams) {
  const Tensor x = RandomTensor(DType::kF32, {3, 5}, 17);
  v1::ExecuteRequest request = ToyRequest(x);
  (*request.mutable_parameters())["factor"].set_double_value(-1.5);
  v1::ExecuteResponse response;
  grpc::Status status = Execute(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::vector<double> out = WireDoubles(response.outputs().at("out"));
  const std::vector<double> in = x.ToDoubles();
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i], -1.5f * static_cast<float>(in[i]));  // the same float product
  }
  EXPECT_EQ(response.platform(), "cpu");
  EXPECT_THAT(response.cache_key(), HasSubstr("toy_scale@v1:"));
  // An int is taken for a float param; the default, written or not, is one cache key.
  v1::ExecuteRequest twice = ToyRequest(x);
  (*twice.mutable_parameters())["factor"].set_int64_value(2);
  v1::ExecuteResponse second;
  ASSERT_TRUE(Execute(twice, &second).ok());
  v1::ExecuteResponse plain;
  ASSERT_TRUE(Execute(ToyRequest(x), &plain).ok());
  EXPECT_EQ(second.cache_key(), plain.cache_key());
  EXPECT_EQ(plain.config_source(), v1::CONFIG_SOURCE_MEMORY);
}

TEST_F(ToyKernelTest, BadParamsAndInputsNameWhatIsWrong) {
  const Tensor x = RandomTensor(DType::kF32, {4}, 18);
  struct Case {
    v1::ExecuteRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  v1::ExecuteRequest wrong_type = ToyRequest(x);
  (*wrong_type.mutable_parameters())["factor"].set_string_value("big");
  cases.push_back({wrong_type, "param 'factor': expected float, got a string"});
  v1::ExecuteRequest out_of_range = ToyRequest(x);
  (*out_of_range.mutable_parameters())["factor"].set_double_value(1e9);
  cases.push_back({out_of_range, "param 'factor' = 1e+09 is out of range: expected -1000..1000"});
  v1::ExecuteRequest unknown = ToyRequest(x);
  (*unknown.mutable_parameters())["scale"].set_double_value(3);
  cases.push_back({unknown, "unknown param 'scale' of toy_scale: expected factor"});
  v1::ExecuteRequest missing;
  missing.set_kernel("toy_scale");
  cases.push_back({missing, "missing input 'x': expected f32"});
  v1::ExecuteRequest typed = ToyRequest(x);
  typed.mutable_mean_pooling()->set_chunk_size(4);
  cases.push_back({typed, "params: mean_pooling params given for kernel 'toy_scale'"});
  for (const Case& c : cases) {
    v1::ExecuteResponse response;
    grpc::Status status = Execute(c.request, &response);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
}

TEST_F(ToyKernelTest, TunedAndPinnedLikeTheOthers) {
  v1::AutotuneRequest tune;
  tune.set_kernel("toy_scale");
  v1::Tensor& x = (*tune.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  x.add_shape(8);
  v1::AutotuneResponse tuned;
  grpc::ClientContext context;
  grpc::Status status = stub_->Autotune(&context, tune, &tuned);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tuned.candidates_size(), 1);
  EXPECT_EQ(tuned.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
}

// The example kernel of docs/ADDING_A_KERNEL.md (tests/support/example_kernel.cc), served next
// to the toy kernel: its schema listed, its float64 reference met, a bad weight refused.
TEST_F(ToyKernelTest, ExampleKernelServedByItsSchema) {
  v1::ListKernelsResponse kernels;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok());
  const v1::KernelInfo* rms = nullptr;
  for (const v1::KernelInfo& k : kernels.kernels()) {
    if (k.name() == "rms_norm") rms = &k;
  }
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(rms->id(), "rms_norm@v1");
  ASSERT_EQ(rms->param_schema_size(), 1);
  EXPECT_EQ(rms->param_schema(0).name(), "eps");

  const Tensor x = RandomTensor(DType::kF32, {3, 7}, 21);
  const Tensor weight = RandomTensor(DType::kF32, {7}, 22);
  v1::ExecuteRequest request;
  request.set_kernel("rms_norm");
  (*request.mutable_inputs())["x"] = ToWire(x);
  (*request.mutable_inputs())["weight"] = ToWire(weight);
  (*request.mutable_parameters())["eps"].set_double_value(0.25);
  v1::ExecuteResponse response;
  grpc::Status status = Execute(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::vector<double> out = WireDoubles(response.outputs().at("out"));
  const std::vector<double> in = x.ToDoubles();
  const std::vector<double> w = weight.ToDoubles();
  ASSERT_EQ(out.size(), in.size());
  for (size_t row = 0; row < 3; ++row) {
    double squares = 0;
    for (size_t h = 0; h < 7; ++h) squares += in[row * 7 + h] * in[row * 7 + h];
    const double inv = 1.0 / std::sqrt(squares / 7 + 0.25);
    for (size_t h = 0; h < 7; ++h) {
      EXPECT_NEAR(out[row * 7 + h], in[row * 7 + h] * inv * w[h], 1e-6);
    }
  }

  (*request.mutable_inputs())["weight"] = ToWire(RandomTensor(DType::kF32, {6}, 23));
  status = Execute(request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("input 'weight': expected shape [H] = [7], got [6]"));
}

}  // namespace
}  // namespace kernelserve::testing
