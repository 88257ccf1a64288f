// kernelserve.v1's shared memory over the kernelserve-server binary: a system region
// registered once, inputs read from it and outputs written into it, equal to inline calls bit
// for bit; every bad reference and registration with its code; the flag that turns it off.
#include <cstring>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

class SharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    absl::Status started = server_->Start({"--cache=memory"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }
  void TearDown() override {
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryResponse response;
    EXPECT_TRUE(stub_->UnregisterSharedMemory(&context, {}, &response).ok());
  }

  grpc::Status Register(const std::string& name, const ShmObject& object, uint64_t offset,
                        uint64_t bytes) {
    grpc::ClientContext context;
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(object.key());
    request.set_offset(offset);
    request.set_byte_size(bytes);
    v1::RegisterSharedMemoryResponse response;
    return stub_->RegisterSystemSharedMemory(&context, request, &response);
  }
  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub_->Execute(&context, request, response);
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* SharedMemoryTest::server_ = nullptr;

v1::TensorRef Ref(const std::string& region, uint64_t offset, uint64_t bytes) {
  v1::TensorRef ref;
  ref.set_region(region);
  ref.set_offset(offset);
  ref.set_byte_size(bytes);
  return ref;
}

// `request` with input `name` moved into region `region` (registered from `base` of `object`)
// at `offset`.
void MoveInput(v1::ExecuteRequest* request, const std::string& name, ShmObject& object,
               uint64_t base, const std::string& region, uint64_t offset) {
  v1::Tensor& tensor = (*request->mutable_inputs())[name];
  std::memcpy(object.data() + base + offset, tensor.data().data(), tensor.data().size());
  *tensor.mutable_ref() = Ref(region, offset, tensor.data().size());
  tensor.clear_data();
}

TEST_F(SharedMemoryTest, AttentionInAndOutOfARegionEqualsTheInlineCall) {
  AttentionInputsOptions options;
  options.B = 2;
  options.Sq = 21;
  options.Sk = 30;
  options.D = 40;
  options.dtype = DType::kF16;
  options.seed = 5;
  const TensorMap inputs = RandomAttentionInputs(options);
  v1::ExecuteRequest inline_request;
  inline_request.set_kernel("flash_attention");
  for (const auto& [name, tensor] : inputs)
    (*inline_request.mutable_inputs())[name] = ToWire(tensor);
  (*inline_request.mutable_parameters())["causal"].set_bool_value(true);
  (*inline_request.mutable_parameters())["return_lse"].set_bool_value(true);
  v1::ExecuteResponse want;
  ASSERT_TRUE(Execute(inline_request, &want).ok());

  ShmObject object(1 << 20);
  ASSERT_TRUE(Register("t", object, 4096, (1 << 20) - 4096).ok());
  v1::ExecuteRequest request = inline_request;
  MoveInput(&request, "q", object, 4096, "t", 0);
  MoveInput(&request, "k", object, 4096, "t", 64 * 1024);
  (*request.mutable_output_regions())["out"] = Ref("t", 256 * 1024, 128 * 1024);
  std::memset(object.data() + 4096 + 256 * 1024, 0x7f, 128 * 1024);  // poisoned
  v1::ExecuteResponse got;
  grpc::Status status = Execute(request, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string& out = want.outputs().at("out").data();
  EXPECT_TRUE(got.outputs().at("out").data().empty());
  EXPECT_EQ(got.outputs().at("out").dtype(), v1::DTYPE_F16);
  EXPECT_EQ(got.outputs().at("out").shape_size(), 4);
  EXPECT_TRUE(std::string(object.data() + 4096 + 256 * 1024, out.size()) == out);
  EXPECT_TRUE(got.outputs().at("lse").data() == want.outputs().at("lse").data());  // inline

  // The stream takes refs too.
  grpc::ClientContext context;
  auto stream = stub_->ExecuteStream(&context);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  v1::ExecuteResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  EXPECT_EQ(streamed.status().code(), 0) << streamed.status().message();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SharedMemoryTest, BadReferencesAndRegistrationsGetTheirCodes) {
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 3);
  ShmObject object(64 * 1024);
  ASSERT_TRUE(Register("r", object, 0, 64 * 1024).ok());
  EXPECT_EQ(Register("r", object, 0, 16).error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Register("big", object, 0, 128 * 1024).error_code(), StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext list_context;
  v1::SharedMemoryStatusResponse listed;
  ASSERT_TRUE(stub_->SharedMemoryStatus(&list_context, {}, &listed).ok());
  ASSERT_EQ(listed.regions_size(), 1);
  EXPECT_EQ(listed.regions(0).key(), object.key());
  EXPECT_EQ(listed.regions(0).kind(), "system");
  EXPECT_EQ(listed.regions(0).in_use(), 0);

  const v1::ExecuteRequest good = [&] {
    v1::ExecuteRequest request = MeanPoolingRequest(x);
    MoveInput(&request, "x", object, 0, "r", 1024);
    return request;
  }();
  v1::ExecuteResponse response;
  ASSERT_TRUE(Execute(good, &response).ok());
  struct Bad {
    const char* what;
    StatusCode code;
    std::function<void(v1::ExecuteRequest*)> spoil;
  };
  const std::vector<Bad> cases = {
      {"unknown region", StatusCode::NOT_FOUND,
       [](v1::ExecuteRequest* r) { (*r->mutable_inputs())["x"].mutable_ref()->set_region("z"); }},
      {"past the end", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) {
         (*r->mutable_inputs())["x"].mutable_ref()->set_offset(63 * 1024 + 4);
       }},
      {"not the tensor's size", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) {
         (*r->mutable_inputs())["x"].mutable_ref()->set_byte_size(100);
       }},
      {"data and ref", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_inputs())["x"].set_data("1234"); }},
      {"output too small", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_output_regions())["out"] = Ref("r", 0, 8); }},
      {"output not produced", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_output_regions())["lse"] = Ref("r", 0, 8); }},
  };
  for (const Bad& bad : cases) {
    v1::ExecuteRequest request = good;
    bad.spoil(&request);
    const grpc::Status status = Execute(request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << bad.what << ": " << status.error_message();
  }
  v1::ExecuteBatchRequest batch;
  batch.set_kernel("mean_pooling");
  *batch.add_items()->mutable_inputs() = good.inputs();
  grpc::ClientContext batch_context;
  v1::ExecuteBatchResponse batch_response;
  grpc::Status batched = stub_->ExecuteBatch(&batch_context, batch, &batch_response);
  EXPECT_TRUE(!batched.ok() || batch_response.items(0).status().code() != 0);

  grpc::ClientContext gone_context;
  v1::UnregisterSharedMemoryRequest gone;
  gone.set_name("r");
  v1::UnregisterSharedMemoryResponse unregistered;
  ASSERT_TRUE(stub_->UnregisterSharedMemory(&gone_context, gone, &unregistered).ok());
  EXPECT_EQ(Execute(good, &response).error_code(), StatusCode::NOT_FOUND);
}

TEST(SharedMemoryOffTest, RegistrationIsUnimplementedAndTheStartupLineSaysSo) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--shared-memory=off"}).ok());
  EXPECT_NE(server.startup_line().find("; shared memory off"), std::string::npos)
      << server.startup_line();
  ShmObject object(4096);
  auto stub = MakeStub(server.address());
  grpc::ClientContext context;
  v1::RegisterSystemSharedMemoryRequest request;
  request.set_name("r");
  request.set_key(object.key());
  request.set_byte_size(4096);
  v1::RegisterSharedMemoryResponse response;
  const grpc::Status status = stub->RegisterSystemSharedMemory(&context, request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::UNIMPLEMENTED);
  EXPECT_NE(status.error_message().find("--shared-memory=off"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(server.Stop().ok());
}

}  // namespace
}  // namespace kernelserve::testing
