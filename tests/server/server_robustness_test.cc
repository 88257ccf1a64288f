// Requests that once hung, aborted or starved the server (a reliability probe of the service):
// each now gets a clear status, and the server goes on answering everyone else.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/raw_calls.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;
using ::testing::HasSubstr;

constexpr char kExecute[] = "/kernelserve.v1.KernelService/Execute";
constexpr char kStream[] = "/kernelserve.v1.KernelService/ExecuteStream";

// mean_pooling, x f32 [1,1,1], config num_warps = 1e9: the probe's request that hung the
// server for good (scratch sized from the config threw std::bad_alloc on gRPC's thread; then
// num_warps was the CPU's threads, now refused as not a field of the cpu platform, naming the
// new field and its range).
constexpr char kHugeWarpsHex[] =
    "0a0c6d65616e5f706f6f6c696e6712120a0178120d080112030101011a04000000002a06208094ebdc03";

class RobustnessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    absl::Status started = server_->Start(
        {"--cache=memory", "--max-synthetic-bytes=67108864", "--max-inflight-bytes=536870912"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }

  // A small valid Execute answers OK, and in time: nothing is left holding the worker.
  void ExpectServerAnswers() {
    const Tensor x = RandomTensor(DType::kF32, {2, 5, 8}, 7);
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status = stub_->Execute(&context, MeanPoolingRequest(x), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* RobustnessTest::server_ = nullptr;

v1::ExecuteRequest AttentionRequest(int64_t seq, int block) {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  for (const char* name : {"q", "k", "v"}) {
    (*request.mutable_inputs())[name] = ToWire(RandomTensor(DType::kF32, {1, seq, 2, 16}, 3));
  }
  request.mutable_config()->set_block_q(block);
  request.mutable_config()->set_block_k(block);
  return request;
}

TEST_F(RobustnessTest, HugeConfigFieldIsInvalidArgumentNamingTheFieldAndRange) {
  const std::string request = absl::HexStringToBytes(kHugeWarpsHex);
  RawResult result = RawUnary(server_->address(), kExecute, request);
  EXPECT_EQ(result.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("num_warps=1000000000"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("0..1024"));
  ExpectServerAnswers();

  // Over 64 KiB of input (the worker thread's path, where the exception aborted the process).
  v1::ExecuteRequest large = MeanPoolingRequest(RandomTensor(DType::kF32, {4, 64, 128}, 9));
  (*large.mutable_config()->mutable_fields())["threads"] = 1000000000;
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Execute(&context, large, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("threads=1000000000"));
  EXPECT_THAT(status.error_message(), HasSubstr("0..1024"));

  // Attention tiles of 2^31-1 rows.
  grpc::ClientContext attention_context;
  status = stub_->Execute(&attention_context, AttentionRequest(40, 2147483647), &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("block_q=2147483647"));
  ExpectServerAnswers();
}

TEST_F(RobustnessTest, PutConfigRefusesAConfigOutsideTheLimits) {
  v1::PutConfigRequest put;
  put.set_kernel("mean_pooling");
  v1::Tensor& spec = (*put.mutable_inputs())["x"];
  spec.set_dtype(v1::DTYPE_F32);
  for (int64_t d : {2, 8, 16}) spec.add_shape(d);
  put.mutable_config()->set_block_size(1000000000);
  v1::PutConfigResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->PutConfig(&context, put, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("block_size=1000000000"));
}

TEST_F(RobustnessTest, StreamItemWithAHugeConfigIsAnsweredInBand) {
  v1::ExecuteRequest bad = MeanPoolingRequest(RandomTensor(DType::kF32, {4, 64, 128}, 5), "bad");
  (*bad.mutable_config()->mutable_fields())["threads"] = 1000000000;
  const v1::ExecuteRequest good = MeanPoolingRequest(RandomTensor(DType::kF32, {2, 3, 4}, 6), "ok");
  RawResult result = RawStream(server_->address(), kStream, {Bytes(bad), Bytes(good)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.responses.size(), 2u);
  for (const std::string& bytes : result.responses) {
    v1::ExecuteResponse answer;
    ASSERT_TRUE(answer.ParseFromString(bytes));
    if (answer.request_id() == "bad") {
      EXPECT_EQ(answer.status().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
      EXPECT_THAT(answer.status().message(), HasSubstr("threads=1000000000"));
    } else {
      EXPECT_EQ(answer.request_id(), "ok");
      EXPECT_EQ(answer.status().code(), 0);
    }
  }
}

TEST_F(RobustnessTest, UnparseableBytesAreInvalidArgumentNamingTheMessage) {
  for (const std::string& bytes : {std::string("\xff"),
                                   std::string("\x0a\x05"
                                               "ab"),
                                   std::string("\x0a\x02\xc3\x28")}) {
    RawResult result = RawUnary(server_->address(), kExecute, bytes);
    EXPECT_EQ(result.status.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(result.status.error_message(), HasSubstr("kernelserve.v1.ExecuteRequest"));
  }
  RawResult truncated = RawUnary(server_->address(), kExecute,
                                 std::string("\x0a\x05"
                                             "ab"));
  EXPECT_THAT(truncated.status.error_message(), HasSubstr("field 1 (kernel)"));
  RawResult utf8 = RawUnary(server_->address(), kExecute, std::string("\x0a\x02\xc3\x28"));
  EXPECT_THAT(utf8.status.error_message(), HasSubstr("not valid UTF-8"));
  RawResult admin =
      RawUnary(server_->address(), "/kernelserve.v1.KernelService/ListKernels", "\xff\xff");
  EXPECT_EQ(admin.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(admin.status.error_message(), HasSubstr("kernelserve.v1.ListKernelsRequest"));
  ExpectServerAnswers();
}

TEST_F(RobustnessTest, StreamAnswersAnUnparseableItemInBandAndGoesOn) {
  const v1::ExecuteRequest first = MeanPoolingRequest(RandomTensor(DType::kF32, {1, 2, 3}, 1), "a");
  const v1::ExecuteRequest last = MeanPoolingRequest(RandomTensor(DType::kF32, {1, 2, 3}, 2), "c");
  RawResult result = RawStream(server_->address(), kStream, {Bytes(first), "\xff", Bytes(last)});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.responses.size(), 3u);
  int ok = 0;
  int invalid = 0;
  for (const std::string& bytes : result.responses) {
    v1::ExecuteResponse answer;
    ASSERT_TRUE(answer.ParseFromString(bytes));
    if (answer.status().code() == 0) ++ok;
    if (answer.status().code() == static_cast<int>(StatusCode::INVALID_ARGUMENT)) {
      ++invalid;
      EXPECT_THAT(answer.status().message(), HasSubstr("kernelserve.v1.ExecuteRequest"));
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(invalid, 1);
}

TEST_F(RobustnessTest, HugeShapeGivesAShortMessageAndTheConnectionStaysUsable) {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int i = 0; i < 100000; ++i) x.add_shape(1);
  x.set_data(std::string(4, '\0'));
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  RawResult result = RawUnary(server_->address(), kExecute, Bytes(request), channel);
  EXPECT_EQ(result.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(result.status.error_message().size(), 1100u);
  EXPECT_THAT(result.status.error_message(), HasSubstr("100000 dims"));
  const v1::ExecuteRequest valid = MeanPoolingRequest(RandomTensor(DType::kF32, {1, 2, 3}, 4));
  for (int i = 0; i < 50; ++i) {
    RawResult ok = RawUnary(server_->address(), kExecute, Bytes(valid), channel);
    ASSERT_TRUE(ok.status.ok()) << i << ": " << ok.status.error_message();
  }
}

TEST_F(RobustnessTest, ShapesOnlyAutotuneOverTheLimitIsRefusedBeforeSynthesis) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1 << 20, 1 << 20, 1024}, {1, 65536, 1024}}) {
    v1::AutotuneRequest request;
    request.set_kernel("mean_pooling");
    v1::Tensor& x = (*request.mutable_inputs())["x"];
    x.set_dtype(v1::DTYPE_F32);
    for (int64_t d : shape) x.add_shape(d);
    v1::AutotuneResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->Autotune(&context, request, &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(), HasSubstr("--max-synthetic-bytes"));
  }
  ExpectServerAnswers();
}

// A shapes-only tuning of a slow CPU attention stops at its deadline, is counted with the code
// its client saw, and the worker is free again right after.
TEST_F(RobustnessTest, AutotuneStopsAtItsDeadlineAndIsCountedAsSuch) {
  v1::AutotuneRequest request;
  request.set_kernel("flash_attention");
  for (const char* name : {"q", "k", "v"}) {
    v1::Tensor& t = (*request.mutable_inputs())[name];
    t.set_dtype(v1::DTYPE_F32);
    for (int64_t d : {1, 2048, 8, 64}) t.add_shape(d);
  }
  const auto start = std::chrono::steady_clock::now();
  v1::AutotuneResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  grpc::Status status = stub_->Autotune(&context, request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::DEADLINE_EXCEEDED);
  ExpectServerAnswers();
  // Before, the worker was held for the whole tuning (27-31 s in the probe).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));

  absl::StatusOr<std::string> metrics = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // The server records the call once it has stopped; give it a moment.
  for (int i = 0;
       i < 50 && MetricSum(*metrics, "kernelserve_requests_total",
                           {"kernel=\"flash_attention\"", "code=\"DEADLINE_EXCEEDED\""}) == 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    metrics = HttpGet(server_->metrics_port(), "/metrics");
    ASSERT_TRUE(metrics.ok());
  }
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_requests_total",
                      {"kernel=\"flash_attention\"", "code=\"DEADLINE_EXCEEDED\""}),
            1);
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_requests_total",
                      {"kernel=\"flash_attention\"", "code=\"OK\""}),
            0);
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_autotune_runs_total",
                      {"kernel=\"flash_attention\"", "outcome=\"ok\""}),
            0);
}

}  // namespace
}  // namespace kernelserve::testing
