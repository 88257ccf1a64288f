// `kernelserve bench --protocol=v2` without a server: the ModelInferRequest built from the
// native request, the timings read from a ModelInfer answer, and failed calls counted as the
// native bench counts them.
#include "client/cli/bench_v2.h"

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/bench.h"
#include "client/cli/cli.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

v1::Tensor MakeTensor(v1::DType dtype, std::initializer_list<int64_t> shape, std::string data) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Assign(shape.begin(), shape.end());
  tensor.set_data(std::move(data));
  return tensor;
}

v1::ExecuteRequest TwoInputs() {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  request.set_request_id("r1");
  (*request.mutable_inputs())["x"] = MakeTensor(v1::DTYPE_F32, {1, 2}, std::string(8, 'x'));
  (*request.mutable_inputs())["cu_seqlens"] = MakeTensor(v1::DTYPE_I32, {2}, std::string(8, 'c'));
  auto& params = *request.mutable_parameters();
  params["b"].set_bool_value(true);
  params["i"].set_int64_value(-7);
  params["d"].set_double_value(0.5);
  params["s"].set_string_value("text");
  return request;
}

TEST(ToModelInferTest, MapsInputsBytesAndParams) {
  absl::StatusOr<inference::ModelInferRequest> infer = ToModelInfer(TwoInputs());
  ASSERT_TRUE(infer.ok()) << infer.status();
  EXPECT_EQ(infer->model_name(), "mean_pooling");
  EXPECT_EQ(infer->model_version(), "");
  EXPECT_EQ(infer->id(), "r1");
  ASSERT_EQ(infer->inputs_size(), 2);
  ASSERT_EQ(infer->raw_input_contents_size(), 2);
  for (int i = 0; i < 2; ++i) {  // the bytes of each input at its own index
    const auto& input = infer->inputs(i);
    EXPECT_FALSE(input.has_contents());
    if (input.name() == "x") {
      EXPECT_EQ(input.datatype(), "FP32");
      EXPECT_EQ(std::vector<int64_t>(input.shape().begin(), input.shape().end()),
                std::vector<int64_t>({1, 2}));
      EXPECT_EQ(infer->raw_input_contents(i), std::string(8, 'x'));
    } else {
      EXPECT_EQ(input.name(), "cu_seqlens");
      EXPECT_EQ(input.datatype(), "INT32");
      EXPECT_EQ(infer->raw_input_contents(i), std::string(8, 'c'));
    }
  }
  const auto& params = infer->parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_TRUE(params.at("b").has_bool_param() && params.at("b").bool_param());
  EXPECT_EQ(params.at("i").int64_param(), -7);
  EXPECT_EQ(params.at("d").double_param(), 0.5);
  EXPECT_EQ(params.at("s").string_param(), "text");
  EXPECT_TRUE(infer->outputs().empty());  // every output
}

TEST(ToModelInferTest, EveryDtypeHasItsDatatype) {
  const std::vector<std::pair<v1::DType, std::string>> cases = {
      {v1::DTYPE_F32, "FP32"},  {v1::DTYPE_F16, "FP16"},  {v1::DTYPE_BF16, "BF16"},
      {v1::DTYPE_I32, "INT32"}, {v1::DTYPE_I64, "INT64"}, {v1::DTYPE_BOOL, "BOOL"}};
  for (const auto& [dtype, datatype] : cases) {
    v1::ExecuteRequest request;
    (*request.mutable_inputs())["x"] = MakeTensor(dtype, {1}, "");
    absl::StatusOr<inference::ModelInferRequest> infer = ToModelInfer(request);
    ASSERT_TRUE(infer.ok()) << infer.status();
    EXPECT_EQ(infer->inputs(0).datatype(), datatype);
  }
  v1::ExecuteRequest request;
  (*request.mutable_inputs())["x"] = MakeTensor(v1::DTYPE_UNSPECIFIED, {1}, "");
  EXPECT_EQ(ToModelInfer(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ToModelInferTest, Fp8HasNoDatatypeAndPointsAtTheNativeProtocol) {
  for (v1::DType dtype : {v1::DTYPE_F8_E4M3, v1::DTYPE_F8_E5M2}) {
    v1::ExecuteRequest request;
    (*request.mutable_inputs())["kv"] = MakeTensor(dtype, {2}, "ab");
    const absl::Status status = ToModelInfer(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("input 'kv'"), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find(v1::DType_Name(dtype)), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find("--protocol=native"), absl::string_view::npos) << status;
  }
}

TEST(ToModelInferTest, RefusesWhatTheFrontDoorDoesNotTakeNamingTheFlag) {
  v1::ExecuteRequest config = TwoInputs(), autotune = config, platform = config, device = config;
  config.mutable_config()->set_block_size(64);
  autotune.mutable_policy()->set_allow_autotune(true);
  platform.set_platform("cuda");
  device.set_device(0);
  const std::vector<std::pair<const v1::ExecuteRequest*, std::string>> cases = {
      {&config, "--config"},
      {&autotune, "--autotune"},
      {&platform, "--platform"},
      {&device, "--device"}};
  for (const auto& [request, flag] : cases) {
    const absl::Status status = ToModelInfer(*request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(status.message().find(flag), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find("--protocol=v2"), absl::string_view::npos) << status;
  }
  v1::ExecuteRequest pinned = TwoInputs();
  pinned.set_kernel("mean_pooling@v1");
  const absl::Status status = ToModelInfer(pinned).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("give 'mean_pooling'"), absl::string_view::npos) << status;
  v1::ExecuteRequest automatic = TwoInputs();
  automatic.set_platform("auto");  // the server's choice either way
  EXPECT_TRUE(ToModelInfer(automatic).ok());
}

TEST(TimingsOfTest, ReadsTheTimingParameters) {
  inference::ModelInferResponse response;
  auto& params = *response.mutable_parameters();
  params["recv_us"].set_int64_param(1);
  params["queue_us"].set_int64_param(2);
  params["select_us"].set_int64_param(3);
  params["h2d_us"].set_int64_param(4);
  params["kernel_us"].set_int64_param(5);
  params["total_us"].set_int64_param(20);
  params["config_source"].set_string_param("heuristic");
  const ServerTimings t = TimingsOf(response);
  EXPECT_EQ(t.recv_us, 1);
  EXPECT_EQ(t.queue_us, 2);
  EXPECT_EQ(t.select_us, 3);
  EXPECT_EQ(t.h2d_us, 4);
  EXPECT_EQ(t.kernel_us, 5);
  EXPECT_EQ(t.d2h_us, 0);  // absent
  EXPECT_EQ(t.total_us, 20);
}

TEST(RunBenchV2Test, FailedCallsCountAsTheNativeOnes) {
  ClientOptions options;
  options.target = "127.0.0.1:1";  // nothing listens: every call is UNAVAILABLE
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  BenchOptions bench;
  bench.max_requests = 3;
  const v1::ExecuteRequest request = TwoInputs();
  absl::StatusOr<BenchReport> v2 = RunBenchV2(**client, request, bench);
  ASSERT_TRUE(v2.ok()) << v2.status();
  const BenchReport native =
      RunBench(**client, std::make_shared<const v1::ExecuteRequest>(request), bench);
  for (const BenchReport* report : std::vector<const BenchReport*>{&*v2, &native}) {
    EXPECT_EQ(report->ok, 0);
    EXPECT_EQ(report->errors, 1);  // no server: the first call ends the run
    EXPECT_EQ(report->first_error.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(report->fatal.code(), absl::StatusCode::kUnavailable);
  }
  v1::ExecuteRequest with_config = request;
  with_config.mutable_config()->set_block_size(64);
  EXPECT_EQ(RunBenchV2(**client, with_config, bench).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The command line: the flag in the help, refused combinations before any call (nothing
// listens at the target), exit code 3 (INVALID_ARGUMENT) as for the other bad flag values.
TEST(BenchCommandTest, ProtocolFlag) {
  std::ostringstream out, err;
  EXPECT_EQ(RunCli({"help", "bench"}, out, err, /*err_is_tty=*/false), 0);
  EXPECT_NE(out.str().find("--protocol native|v2"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("--device and a\nKERNEL@VERSION id are native only"), std::string::npos)
      << out.str();
  const std::vector<std::string> call = {"--target=127.0.0.1:1", "bench", "mean_pooling",
                                         "--shape=x=f32:1,16,64", "--requests=1"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--protocol=v3"}, "--protocol=v3: expected native or v2"},
      {{"--protocol=v2", "--config=block_size=64"}, "--config is not taken with --protocol=v2"},
      {{"--protocol=v2", "--autotune"}, "--autotune is not taken with --protocol=v2"},
      {{"--protocol=v2", "--platform=cuda"}, "--platform is not taken with --protocol=v2"},
      {{"--protocol=v2", "--device=0"}, "--device is not taken with --protocol=v2"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = call;
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::ostringstream out, err;
    EXPECT_EQ(RunCli(argv, out, err, /*err_is_tty=*/false), 3) << err.str();
    EXPECT_NE(err.str().find(message), std::string::npos) << err.str();
    EXPECT_EQ(out.str(), "");
  }
}

}  // namespace
}  // namespace kernelserve::cli
