// The server's memory stays within its limits (docs/SERVER.md, "Limits"): a stream whose client
// does not read stops reading and keeps its answers counted, calls whose answer could not be
// sent or whose outputs pass the in-flight budget are refused before any work, and memory goes
// back to the system once the server is idle.
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kHidden = 1024;

// A field of /proc/PID/status (VmRSS, VmHWM) in bytes; 0 when unknown.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream values(line.substr(field.size() + 1));
    int64_t kib = 0;
    values >> kib;
    return kib * 1024;
  }
  return 0;
}

// mean_pooling_bwd with dout [1,H] and x [1,rows,H] f32 by shape alone: a request of 4 KiB whose
// dx is rows * 4 KiB.
v1::ExecuteRequest BwdRequest(int64_t rows, const std::string& request_id = "") {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling_bwd");
  request.set_request_id(request_id);
  (*request.mutable_inputs())["dout"] = ToWire(RandomTensor(DType::kF32, {1, kHidden}, 5));
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int64_t d : {int64_t{1}, rows, kHidden}) x.add_shape(d);
  return request;
}

// The same call as a KServe v2 request (x shape-only: an empty raw_input_contents entry).
inference::ModelInferRequest InferBwdRequest(int64_t rows, const std::string& id) {
  inference::ModelInferRequest request;
  request.set_model_name("mean_pooling_bwd");
  request.set_id(id);
  auto* dout = request.add_inputs();
  dout->set_name("dout");
  dout->set_datatype("FP32");
  dout->add_shape(1);
  dout->add_shape(kHidden);
  auto* x = request.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  for (int64_t d : {int64_t{1}, rows, kHidden}) x->add_shape(d);
  request.add_raw_input_contents(std::string(RandomTensor(DType::kF32, {1, kHidden}, 5).bytes()));
  request.add_raw_input_contents("");
  return request;
}

v1::ExecuteBatchRequest BwdBatch(const std::vector<int64_t>& rows) {
  v1::ExecuteBatchRequest batch;
  batch.set_kernel("mean_pooling_bwd");
  for (int64_t r : rows) *batch.add_items() = BwdRequest(r);
  return batch;
}

std::shared_ptr<grpc::Channel> LargeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext* context, int seconds) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// Runs of mean_pooling_bwd the server has timed (kernelserve_kernel_duration_seconds).
double BwdKernelRuns(const ServerProcess& server) {
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? MetricSum(*metrics, "kernelserve_kernel_duration_seconds_count",
                                  {"kernel=\"mean_pooling_bwd\""})
                      : -1;
}

// The server's RSS once it is quiet after a first call, for the comparisons below.
int64_t SettledRss(const ServerProcess& server) {
  auto stub = MakeStub(server.address());
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, 10);
  EXPECT_TRUE(stub->Execute(&context, BwdRequest(16), &response).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return ProcStatusBytes(server.pid(), "VmRSS");
}

// A stream whose requests a thread of its own writes (blocking as gRPC's flow control says),
// while the test reads the answers when it chooses. Thread safety: the test's thread only.
template <typename Request, typename Response>
class UnreadStream {
 public:
  using ReaderWriter = grpc::ClientReaderWriter<Request, Response>;

  // Starts the stream with `open` (a stub's stream method on `context`) and writes `requests`
  // from a thread, then half-closes.
  template <typename Open>
  UnreadStream(Open open, std::vector<Request> requests) {
    SetDeadline(&context_, 90);
    stream_ = open(&context_);
    writer_ = std::thread([this, requests = std::move(requests)] {
      for (const Request& request : requests) {
        if (!stream_->Write(request)) return;
        ++written_;
      }
      stream_->WritesDone();
    });
  }
  ~UnreadStream() {
    context_.TryCancel();
    if (writer_.joinable()) writer_.join();
  }

  // Every answer until the server ends the stream, then its status.
  grpc::Status ReadAll(std::vector<Response>* answers) {
    Response answer;
    while (stream_->Read(&answer)) answers->push_back(answer);
    writer_.join();
    return stream_->Finish();
  }
  // Cancels the stream and waits for its end.
  grpc::Status Cancel() {
    context_.TryCancel();
    writer_.join();
    Response answer;
    while (stream_->Read(&answer)) {
    }
    return stream_->Finish();
  }
  int written() const { return written_.load(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<ReaderWriter> stream_;
  std::thread writer_;
  std::atomic<int> written_{0};
};

// The largest RSS of the server over `duration` (sampled every 50 ms) and its VmHWM then.
int64_t PeakRssOver(const ServerProcess& server, std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  int64_t peak = 0;
  while (std::chrono::steady_clock::now() < end) {
    peak = std::max(peak, ProcStatusBytes(server.pid(), "VmRSS"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::max(peak, ProcStatusBytes(server.pid(), "VmHWM"));
}

class ServerMemoryTest : public ::testing::Test {
 protected:
  // Starts the server with --cache=memory and `args`.
  void Start(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--cache=memory"};
    all.insert(all.end(), args.begin(), args.end());
    absl::Status started = server_.Start(all);
    ASSERT_TRUE(started.ok()) << started;
  }
  // The server stops after the test's clients are gone (their connections closed, which its
  // drain would otherwise wait for).
  void TearDown() override {
    if (!server_.running()) return;
    absl::StatusOr<int> code = server_.Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
  }

  ServerProcess server_;
};

// Resets the peak RSS (VmHWM) of process `pid` to its RSS now (Linux's clear_refs "5").
void ResetPeak(pid_t pid) { std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5"; }

// Item 9 of the robustness round: the outputs of a large call were held three times over (the
// CPU run's map, the executor's copy, the answer), and a shapes-only Autotune held several
// more copies (the tuner compared outputs as doubles). Now a 256 MiB dx peaks at about one
// copy above the idle server, and a shapes-only Autotune of a 128 MiB x at about three (the
// reference, a candidate's output, the answer), each under the bound asserted here, which the
// old code passed by far (3x and 9x).
TEST_F(ServerMemoryTest, LargeOutputsAreHeldOnceAndTuningCountsItsCopies) {
  Start({});
  const int64_t baseline = SettledRss(server_);
  auto stub = MakeStub(server_.address());
  constexpr int64_t kDxRows = 65536;  // dx f32 [1,65536,1024]: 256 MiB
  ResetPeak(server_.pid());
  {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, 60);
    grpc::Status status = stub->Execute(&context, BwdRequest(kDxRows), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs().at("dx").data().size(), static_cast<size_t>(256 * kMiB));
  }
  const int64_t execute_peak = ProcStatusBytes(server_.pid(), "VmHWM") - baseline;
  EXPECT_LT(execute_peak, 2 * 256 * kMiB) << execute_peak / kMiB << " MiB";

  ResetPeak(server_.pid());
  {
    v1::AutotuneRequest tune;
    tune.set_kernel("mean_pooling_bwd");
    (*tune.mutable_inputs())["dout"] = ToWire(RandomTensor(DType::kF32, {1, kHidden}, 6));
    v1::Tensor& x = (*tune.mutable_inputs())["x"];
    x.set_dtype(v1::DTYPE_F32);
    for (int64_t d : {int64_t{1}, kDxRows / 2, kHidden}) x.add_shape(d);
    v1::AutotuneResponse tuned;
    grpc::ClientContext context;
    SetDeadline(&context, 120);
    grpc::Status status = stub->Autotune(&context, tune, &tuned);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const int64_t tune_peak = ProcStatusBytes(server_.pid(), "VmHWM") - baseline;
  EXPECT_LT(tune_peak, 5 * 128 * kMiB) << tune_peak / kMiB << " MiB";
}

constexpr int kStreamItems = 40;
constexpr int64_t kItemRows = 8192;  // 32 MiB of dx per answer: 1.25 GiB for the whole stream

// A native stream of 40 items whose answers take 1.25 GiB is not read for 4 s: the server stops
// reading once the stream holds its share (a quarter) of the 512 MiB budget, so its RSS grows
// by less than half the budget, a call of another client is served meanwhile, and every answer
// arrives, OK, once the client reads.
TEST_F(ServerMemoryTest, StreamNotReadStopsReadingAndEveryAnswerArrivesOnceRead) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-inflight-bytes=536870912"}));
  const int64_t baseline = SettledRss(server_);
  std::vector<v1::ExecuteRequest> requests;
  for (int i = 0; i < kStreamItems; ++i) {
    requests.push_back(BwdRequest(kItemRows, "r" + std::to_string(i)));
  }
  auto stub = v1::KernelService::NewStub(LargeChannel(server_.address()));
  UnreadStream<v1::ExecuteRequest, v1::ExecuteResponse> stream(
      [&](grpc::ClientContext* context) { return stub->ExecuteStream(context); }, requests);
  const int64_t peak = PeakRssOver(server_, std::chrono::milliseconds(4000));
  EXPECT_LT(peak - baseline, 256 * kMiB) << "peak " << peak << ", baseline " << baseline;

  // Another client is served meanwhile: the stream holds a quarter of the budget at most.
  {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, 20);
    grpc::Status status = stub->Execute(&context, BwdRequest(16384), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  std::vector<v1::ExecuteResponse> answers;
  grpc::Status status = stream.ReadAll(&answers);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(answers.size(), static_cast<size_t>(kStreamItems));
  std::set<std::string> ids;
  for (const v1::ExecuteResponse& answer : answers) {
    EXPECT_EQ(answer.status().code(), 0) << answer.status().message();
    EXPECT_EQ(answer.outputs().at("dx").data().size(), static_cast<size_t>(kItemRows * 4096));
    ids.insert(answer.request_id());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kStreamItems));
}

// The same through the KServe v2 ModelStreamInfer, which shares the stream's reactor.
TEST_F(ServerMemoryTest, KServeStreamNotReadStopsReadingAndEveryAnswerArrivesOnceRead) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-inflight-bytes=536870912"}));
  const int64_t baseline = SettledRss(server_);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < kStreamItems; ++i) {
    requests.push_back(InferBwdRequest(kItemRows, "r" + std::to_string(i)));
  }
  auto stub = inference::GRPCInferenceService::NewStub(LargeChannel(server_.address()));
  UnreadStream<inference::ModelInferRequest, inference::ModelStreamInferResponse> stream(
      [&](grpc::ClientContext* context) { return stub->ModelStreamInfer(context); }, requests);
  const int64_t peak = PeakRssOver(server_, std::chrono::milliseconds(4000));
  EXPECT_LT(peak - baseline, 256 * kMiB) << "peak " << peak << ", baseline " << baseline;

  std::vector<inference::ModelStreamInferResponse> answers;
  grpc::Status status = stream.ReadAll(&answers);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(answers.size(), static_cast<size_t>(kStreamItems));
  std::set<std::string> ids;
  for (const inference::ModelStreamInferResponse& answer : answers) {
    EXPECT_EQ(answer.error_message(), "");
    ASSERT_EQ(answer.infer_response().raw_output_contents_size(), 1);
    EXPECT_EQ(answer.infer_response().raw_output_contents(0).size(),
              static_cast<size_t>(kItemRows * 4096));
    ids.insert(answer.infer_response().id());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kStreamItems));
}

// A batch whose first item has a 4 KiB dx and whose ten later items have 8 MiB each: counted
// item by item, its 80 MiB of outputs pass the 64 MiB budget, and it is refused before any item
// runs.
TEST_F(ServerMemoryTest, BatchCountsEachItemsOutputsAndIsRefusedBeforeAnyWork) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-inflight-bytes=67108864"}));
  std::vector<int64_t> rows = {1};
  rows.insert(rows.end(), 10, 2048);
  auto stub = MakeStub(server_.address());
  v1::ExecuteBatchResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, 20);
  grpc::Status status = stub->ExecuteBatch(&context, BwdBatch(rows), &response);
  EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--max-inflight-bytes=67108864"));
  EXPECT_THAT(status.error_message(), HasSubstr("83890176 bytes"));  // 4 KiB + 10 x 8 MiB
  EXPECT_EQ(BwdKernelRuns(server_), 0);

  // A batch within the budget runs.
  v1::ExecuteBatchResponse small;
  grpc::ClientContext small_context;
  SetDeadline(&small_context, 20);
  status = stub->ExecuteBatch(&small_context, BwdBatch({1, 2048, 2048}), &small);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(small.items_size(), 3);
  EXPECT_EQ(small.items(2).outputs().at("dx").data().size(), static_cast<size_t>(8 * kMiB));
}

// With --max-message-bytes=16 MiB, a call whose answer would pass it is RESOURCE_EXHAUSTED
// naming the sizes and the flag before it runs, whatever the front door: Execute (32 MiB of
// dx), ExecuteBatch (three items of 8 MiB), a stream item (in-band), ModelInfer.
TEST_F(ServerMemoryTest, AnswerOverMaxMessageBytesIsRefusedBeforeAnyWork) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-message-bytes=16777216"}));
  auto stub = v1::KernelService::NewStub(LargeChannel(server_.address()));
  {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, 20);
    grpc::Status status = stub->Execute(&context, BwdRequest(8192), &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("33554432 bytes of outputs"));
    EXPECT_THAT(status.error_message(), HasSubstr("--max-message-bytes=16777216"));
  }
  {
    v1::ExecuteBatchResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, 20);
    grpc::Status status = stub->ExecuteBatch(&context, BwdBatch({2048, 2048, 2048}), &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("25165824 bytes of outputs"));
    EXPECT_THAT(status.error_message(), HasSubstr("--max-message-bytes=16777216"));
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context, 20);
    auto stream = stub->ExecuteStream(&context);
    ASSERT_TRUE(stream->Write(BwdRequest(8192, "big")));
    ASSERT_TRUE(stream->WritesDone());
    v1::ExecuteResponse answer;
    ASSERT_TRUE(stream->Read(&answer));
    EXPECT_EQ(answer.request_id(), "big");
    EXPECT_EQ(answer.status().code(), static_cast<int>(StatusCode::RESOURCE_EXHAUSTED));
    EXPECT_THAT(answer.status().message(), HasSubstr("--max-message-bytes=16777216"));
    EXPECT_FALSE(stream->Read(&answer));
    EXPECT_TRUE(stream->Finish().ok());
  }
  {
    auto v2 = inference::GRPCInferenceService::NewStub(LargeChannel(server_.address()));
    inference::ModelInferResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, 20);
    grpc::Status status = v2->ModelInfer(&context, InferBwdRequest(8192, "big"), &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("33554432 bytes of outputs"));
    EXPECT_THAT(status.error_message(), HasSubstr("--max-message-bytes=16777216"));
  }
  EXPECT_EQ(BwdKernelRuns(server_), 0);

  // An answer that fits is sent.
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, 20);
  grpc::Status status = stub->Execute(&context, BwdRequest(2048), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.outputs().at("dx").data().size(), static_cast<size_t>(8 * kMiB));
}

// A stream whose client does not read holds 24 answers of 32 MiB for 34 s (past the 30 s of
// idle after which the server gives memory back), then is cancelled: within 50 s of idle the
// server's RSS is back near where it was before the stream. About 80 s.
TEST_F(ServerMemoryTest, RssComesBackAfterAStuckStreamIsCancelled) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer's allocator keeps freed memory in its quarantine: what the "
                  "server gives back is glibc's, which this build does not use";
#endif
#endif
  ASSERT_NO_FATAL_FAILURE(Start({"--max-inflight-bytes=536870912"}));
  const int64_t baseline = SettledRss(server_);
  std::vector<v1::ExecuteRequest> requests;
  for (int i = 0; i < 24; ++i) requests.push_back(BwdRequest(kItemRows, "r" + std::to_string(i)));
  auto stub = v1::KernelService::NewStub(LargeChannel(server_.address()));
  {
    UnreadStream<v1::ExecuteRequest, v1::ExecuteResponse> stream(
        [&](grpc::ClientContext* context) { return stub->ExecuteStream(context); }, requests);
    std::this_thread::sleep_for(std::chrono::seconds(34));
    EXPECT_GT(ProcStatusBytes(server_.pid(), "VmRSS") - baseline, 64 * kMiB)
        << "the stream should hold some answers";
    EXPECT_EQ(stream.Cancel().error_code(), StatusCode::CANCELLED);
  }
  const auto cancelled = std::chrono::steady_clock::now();
  int64_t rss = ProcStatusBytes(server_.pid(), "VmRSS");
  while (rss > baseline + 64 * kMiB &&
         std::chrono::steady_clock::now() - cancelled < std::chrono::seconds(50)) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    rss = ProcStatusBytes(server_.pid(), "VmRSS");
  }
  EXPECT_LE(rss, baseline + 64 * kMiB) << "baseline " << baseline;
}

}  // namespace
}  // namespace kernelserve::testing
