// The KServe v2 front door on the native data path, in process: InferenceServiceImpl served over
// loopback gRPC with a host allocator that counts its buffers (standing in for the CUDA
// platform's pinned pool). A large ModelInfer's raw_input_contents must be parsed into the
// allocator's buffers and used as the kernel's inputs from there (the old path parsed them
// with protobuf into fresh strings and never asked the allocator), the answer must equal the
// kernel's, and every buffer must be given back once the call is answered. The same for an
// item of ModelStreamInfer.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/executor.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/budget.h"
#include "server/kserve_service.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/worker_pool.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve::server {
namespace {

using ::inference::GRPCInferenceService;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;
using ::kernelserve::testing::FakeCounters;
using ::kernelserve::testing::FakeKernel;

constexpr size_t kMiB = size_t{1} << 20;

// Heap buffers of at least 1 MiB, counted. Thread-safe (the counters are atomic).
class CountingAllocator : public HostAllocator {
 public:
  std::shared_ptr<HostBuffer> TryAllocate(size_t bytes) override {
    if (bytes < kMiB) return nullptr;
    allocated_bytes_ += static_cast<int64_t>(bytes);
    ++allocations_;
    ++live_;
    return std::make_shared<HostBuffer>(std::malloc(bytes), bytes, /*pinned=*/false,
                                        [this](void* p) {
                                          std::free(p);
                                          --live_;
                                        });
  }
  int allocations() const { return allocations_; }
  int64_t allocated_bytes() const { return allocated_bytes_; }
  // True once no buffer is held, waiting up to 5 s (the worker drops a call's inputs once it
  // has answered, which may be after the client has the answer).
  bool AllGivenBack() const {
    for (int i = 0; i < 500 && live_ > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    return live_ == 0;
  }

 private:
  std::atomic<int> allocations_{0};
  std::atomic<int64_t> allocated_bytes_{0};
  std::atomic<int> live_{0};
};

// The fake kernel (out = 2 * x, f32 [N]) served as model "fake_scale" by InferenceServiceImpl
// alone, on the CPU's worker.
class KServeBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.Register(std::make_unique<FakeKernel>(counters_)).ok());
    deps_.executor = &executor_;
    deps_.pool = &pool_;
    deps_.metrics = &metrics_;
    deps_.budget = &budget_;
    deps_.options = &options_;
    deps_.host_allocator = &allocator_;
    service_ = std::make_unique<InferenceServiceImpl>(deps_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    stub_ = GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    pool_.Shutdown();
  }

  // A request of x = f32 [n] holding 0, 1, 2, ...; `id` after the data on the wire too.
  static ModelInferRequest Request(int64_t n) {
    ModelInferRequest request;
    request.set_model_name("fake_scale");
    request.set_id("big-1");
    ModelInferRequest::InferInputTensor* x = request.add_inputs();
    x->set_name("x");
    x->set_datatype("FP32");
    x->add_shape(n);
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
    request.add_raw_input_contents(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return request;
  }

  // The answer of Request(n) is out = 2 * x, f32 [n].
  static void ExpectDoubled(const ModelInferResponse& response, int64_t n) {
    EXPECT_EQ(response.id(), "big-1");
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).name(), "out");
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    const std::string& out = response.raw_output_contents(0);
    ASSERT_EQ(out.size(), static_cast<size_t>(n) * sizeof(float));
    std::vector<float> got(static_cast<size_t>(n));
    std::memcpy(got.data(), out.data(), out.size());
    int wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != 2.0f * i ? 1 : 0;
    EXPECT_EQ(wrong, 0);
  }

  std::shared_ptr<FakeCounters> counters_ = std::make_shared<FakeCounters>();
  KernelRegistry registry_;
  ConfigCache memory_;
  ConfigSelectorChain chain_{&memory_, nullptr};
  Executor executor_{&registry_, &chain_, /*gpus=*/{}};
  WorkerPool pool_{/*devices=*/{-1}};
  Metrics metrics_;
  InflightBudget budget_{int64_t{1} << 30};
  ServerOptions options_;
  CountingAllocator allocator_;
  ServiceDeps deps_;
  std::unique_ptr<InferenceServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GRPCInferenceService::Stub> stub_;
};

TEST_F(KServeBuffersTest, LargeModelInferInputsAreParsedIntoTheAllocatorsBuffers) {
  {  // a small call takes the heap
    grpc::ClientContext context;
    ModelInferResponse response;
    const grpc::Status status = stub_->ModelInfer(&context, Request(1000), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectDoubled(response, 1000);
    EXPECT_EQ(allocator_.allocations(), 0);
  }
  constexpr int64_t kN = int64_t{3} << 20;  // 12 MiB of f32
  grpc::ClientContext context;
  ModelInferResponse response;
  const grpc::Status status = stub_->ModelInfer(&context, Request(kN), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectDoubled(response, kN);
  EXPECT_EQ(allocator_.allocations(), 1);  // the raw entry, once: no copy into another
  EXPECT_EQ(allocator_.allocated_bytes(), kN * 4);
  EXPECT_EQ(counters_->launches.load(), 2);
  EXPECT_TRUE(allocator_.AllGivenBack());
}

TEST_F(KServeBuffersTest, ARawEntryOfTheWrongSizeInABufferIsInvalidArgument) {
  ModelInferRequest request = Request(int64_t{1} << 20);
  request.mutable_inputs(0)->set_shape(0, (int64_t{1} << 20) + 1);  // one element more
  grpc::ClientContext context;
  ModelInferResponse response;
  const grpc::Status status = stub_->ModelInfer(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(allocator_.allocations(), 1);
  EXPECT_TRUE(allocator_.AllGivenBack());
}

TEST_F(KServeBuffersTest, LargeStreamItemInputsAreParsedIntoTheAllocatorsBuffers) {
  constexpr int64_t kN = int64_t{1} << 20;  // 4 MiB of f32
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(Request(kN)));
  ASSERT_TRUE(stream->WritesDone());
  inference::ModelStreamInferResponse answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");
  ExpectDoubled(answer.infer_response(), kN);
  EXPECT_FALSE(stream->Read(&answer));
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(allocator_.allocations(), 1);
  EXPECT_TRUE(allocator_.AllGivenBack());
}

}  // namespace
}  // namespace kernelserve::server
