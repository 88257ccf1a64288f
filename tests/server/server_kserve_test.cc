// The KServe v2 (Open Inference Protocol) front door of the kernelserve-server binary: results
// equal to the native API's bit for bit, every bad case with its exact code, the stream,
// statistics, and the shared-memory calls Triton's tools make. The tritonclient side is
// tests/client/test_kserve_v2.py.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;
using ::inference::GRPCInferenceService;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;

class KServeTest : public ::testing::Test {
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
  void SetUp() override {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ =
        grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args);
    v2_ = GRPCInferenceService::NewStub(channel_);
    native_ = MakeStub(server_->address());
  }

  static void Deadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  }
  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    Deadline(&context);
    return v2_->ModelInfer(&context, request, response);
  }
  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
    grpc::ClientContext context;
    Deadline(&context);
    return native_->Execute(&context, request, response);
  }

  static ServerProcess* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<GRPCInferenceService::Stub> v2_;
  std::unique_ptr<v1::KernelService::Stub> native_;
};
ServerProcess* KServeTest::server_ = nullptr;

const char* Datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "FP32";
    case DType::kF16:
      return "FP16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "INT32";
    case DType::kI64:
      return "INT64";
    case DType::kBool:
      return "BOOL";
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return "";  // KServe v2 has no fp8 datatype
  }
  return "";
}

void AddInput(const std::string& name, const Tensor& tensor, ModelInferRequest* request) {
  ModelInferRequest::InferInputTensor* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(Datatype(tensor.dtype()));
  for (int64_t d : tensor.shape()) input->add_shape(d);
  request->add_raw_input_contents(std::string(tensor.bytes()));
}

// The v2 request and the native one of the same call.
struct SameCall {
  ModelInferRequest v2;
  v1::ExecuteRequest native;
};

SameCall Attention(DType dtype, bool causal, int64_t window_left, double scale) {
  AttentionInputsOptions options;
  options.B = 2;
  options.Sq = 19;
  options.Sk = 23;
  options.Hq = 4;
  options.Hkv = 2;
  options.D = 24;
  options.dtype = dtype;
  options.seed = 77;
  const TensorMap inputs = RandomAttentionInputs(options);
  SameCall call;
  call.v2.set_model_name("flash_attention");
  call.v2.set_id("attention-1");
  call.native.set_kernel("flash_attention");
  for (const char* name : {"q", "k", "v"}) {
    AddInput(name, inputs.at(name), &call.v2);
    (*call.native.mutable_inputs())[name] = ToWire(inputs.at(name));
  }
  auto& v2_params = *call.v2.mutable_parameters();
  auto& params = *call.native.mutable_parameters();
  v2_params["causal"].set_bool_param(causal);
  params["causal"].set_bool_value(causal);
  v2_params["window_left"].set_int64_param(window_left);
  params["window_left"].set_int64_value(window_left);
  v2_params["softmax_scale"].set_double_param(scale);
  params["softmax_scale"].set_double_value(scale);
  v2_params["return_lse"].set_bool_param(true);
  params["return_lse"].set_bool_value(true);
  return call;
}

// Every output of `native` is in `v2` with the same datatype, shape and bytes.
void ExpectSameOutputs(const v1::ExecuteResponse& native, const ModelInferResponse& v2) {
  ASSERT_EQ(v2.outputs_size(), native.outputs_size());
  ASSERT_EQ(v2.raw_output_contents_size(), v2.outputs_size());
  for (int i = 0; i < v2.outputs_size(); ++i) {
    const auto& out = v2.outputs(i);
    ASSERT_TRUE(native.outputs().contains(out.name())) << out.name();
    const v1::Tensor& want = native.outputs().at(out.name());
    absl::StatusOr<DType> dtype = FromProto(want.dtype(), out.name());
    ASSERT_TRUE(dtype.ok());
    EXPECT_EQ(out.datatype(), Datatype(*dtype));
    EXPECT_EQ(std::vector<int64_t>(out.shape().begin(), out.shape().end()),
              std::vector<int64_t>(want.shape().begin(), want.shape().end()));
    EXPECT_TRUE(v2.raw_output_contents(i) == want.data()) << out.name() << " differs";
  }
}

TEST_F(KServeTest, AttentionEqualsTheNativeAnswerBitForBit) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SameCall call = Attention(dtype, /*causal=*/true, /*window_left=*/7, /*scale=*/0.3);
    v1::ExecuteResponse native;
    ASSERT_TRUE(Execute(call.native, &native).ok());
    ModelInferResponse v2;
    grpc::Status status = Infer(call.v2, &v2);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(v2.model_name(), "flash_attention");
    EXPECT_EQ(v2.model_version(), "1");
    EXPECT_EQ(v2.id(), "attention-1");
    ASSERT_EQ(v2.outputs_size(), 2);
    EXPECT_EQ(v2.outputs(0).name(), "out");  // the schema's order
    EXPECT_EQ(v2.outputs(1).name(), "lse");
    ExpectSameOutputs(native, v2);
    EXPECT_EQ(v2.parameters().at("cache_key").string_param(), native.cache_key());
    EXPECT_EQ(v2.parameters().at("platform").string_param(), "cpu");
    EXPECT_EQ(v2.parameters().at("device").int64_param(), -1);
    EXPECT_EQ(v2.parameters().at("config_source").string_param(), "memory");
    EXPECT_GT(v2.parameters().at("total_us").int64_param(), 0);
  }
}

TEST_F(KServeTest, MeanPoolingWithMaskAndOneRequestedOutput) {
  const Tensor x = RandomTensor(DType::kF32, {3, 17, 40}, 5);
  Tensor mask = Tensor::Zeros(DType::kBool, {3, 17});
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data_as<uint8_t>()[i] = (i * 7) % 3 != 0;
  ModelInferRequest request;
  request.set_model_name("mean_pooling");
  request.set_model_version("1");
  AddInput("x", x, &request);
  AddInput("mask", mask, &request);
  request.add_outputs()->set_name("out");
  (*request.mutable_parameters())["chunk_size"].set_int64_param(5);
  v1::ExecuteRequest native_request;
  native_request.set_kernel("mean_pooling");
  (*native_request.mutable_inputs())["x"] = ToWire(x);
  (*native_request.mutable_inputs())["mask"] = ToWire(mask);
  (*native_request.mutable_parameters())["chunk_size"].set_int64_value(5);
  v1::ExecuteResponse native;
  ASSERT_TRUE(Execute(native_request, &native).ok());
  ModelInferResponse v2;
  grpc::Status status = Infer(request, &v2);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectSameOutputs(native, v2);
}

TEST_F(KServeTest, TimeoutZeroIsNoneAndHugeTimeoutsSaturate) {
  const Tensor x = RandomTensor(DType::kF32, {2, 9, 16}, 6);
  ModelInferRequest request;
  request.set_model_name("mean_pooling");
  AddInput("x", x, &request);
  auto& timeout = (*request.mutable_parameters())["timeout"];
  for (int64_t micros : {int64_t{0}, int64_t{7'500'000'000'000'000}, INT64_MAX}) {
    timeout.set_int64_param(micros);
    ModelInferResponse v2;
    grpc::Status status = Infer(request, &v2);
    EXPECT_TRUE(status.ok()) << micros << ": " << status.error_message();
  }
  timeout.set_uint64_param(UINT64_MAX);
  ModelInferResponse v2;
  grpc::Status status = Infer(request, &v2);
  EXPECT_TRUE(status.ok()) << status.error_message();
  timeout.set_int64_param(-1);
  EXPECT_EQ(Infer(request, &v2).error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(KServeTest, TypedContentsAreAcceptedForInputs) {
  const Tensor x = RandomTensor(DType::kF32, {2, 5, 8}, 9);
  ModelInferRequest request;
  request.set_model_name("mean_pooling");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  for (int64_t d : x.shape()) input->add_shape(d);
  for (float v : x.ToFloats()) input->mutable_contents()->add_fp32_contents(v);
  v1::ExecuteResponse native;
  ASSERT_TRUE(Execute(MeanPoolingRequest(x), &native).ok());
  ModelInferResponse v2;
  ASSERT_TRUE(Infer(request, &v2).ok());
  ExpectSameOutputs(native, v2);
}

// The code and a fragment of the message of a bad request.
struct BadCase {
  std::string what;
  StatusCode code;
  std::string says;
  std::function<void(ModelInferRequest*)> spoil;
};

TEST_F(KServeTest, BadRequestsGetTheirCodeAndNameTheFault) {
  const Tensor x = RandomTensor(DType::kF32, {2, 5, 8}, 3);
  const std::vector<BadCase> cases = {
      {"unknown model", StatusCode::NOT_FOUND, "unknown model 'nope'",
       [](ModelInferRequest* r) { r->set_model_name("nope"); }},
      {"unknown version", StatusCode::NOT_FOUND, "no version '2'",
       [](ModelInferRequest* r) { r->set_model_version("2"); }},
      {"missing input", StatusCode::INVALID_ARGUMENT, "'x'",
       [](ModelInferRequest* r) {
         r->clear_inputs();
         r->clear_raw_input_contents();
       }},
      {"wrong datatype string", StatusCode::INVALID_ARGUMENT, "datatype 'FLOAT32'",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("FLOAT32"); }},
      {"datatype the kernel does not take", StatusCode::INVALID_ARGUMENT, "x",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("INT64"); }},
      // The protocol has no fp8: the message points at the native API, which carries it.
      {"an fp8 datatype", StatusCode::INVALID_ARGUMENT,
       "datatype 'FP8_E4M3' is not served: the Open Inference Protocol (KServe v2) has no fp8 "
       "datatype; send f8_e4m3 and f8_e5m2 tensors through the kernelserve.v1 API",
       [](ModelInferRequest* r) {
         r->mutable_inputs(0)->set_datatype("FP8_E4M3");
         r->mutable_raw_input_contents(0)->resize(80);  // 2*5*8 elements of one byte
       }},
      {"raw contents count", StatusCode::INVALID_ARGUMENT, "raw_input_contents: 2 entries",
       [](ModelInferRequest* r) { r->add_raw_input_contents("extra"); }},
      {"raw contents size", StatusCode::INVALID_ARGUMENT, "input 'x'",
       [](ModelInferRequest* r) { r->mutable_raw_input_contents(0)->resize(12); }},
      {"unknown input", StatusCode::INVALID_ARGUMENT, "input 'y' is not an input",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_name("y"); }},
      {"unknown parameter", StatusCode::INVALID_ARGUMENT, "bogus",
       [](ModelInferRequest* r) { (*r->mutable_parameters())["bogus"].set_int64_param(1); }},
      {"parameter of the wrong type", StatusCode::INVALID_ARGUMENT, "chunk_size",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["chunk_size"].set_string_param("big");
       }},
      {"unknown output", StatusCode::INVALID_ARGUMENT, "output 'lse' is not an output",
       [](ModelInferRequest* r) { r->add_outputs()->set_name("lse"); }},
      {"input in a region not registered", StatusCode::NOT_FOUND, "no shared memory region 'r'",
       [](ModelInferRequest* r) {
         auto& parameters = *r->mutable_inputs(0)->mutable_parameters();
         parameters["shared_memory_region"].set_string_param("r");
         parameters["shared_memory_byte_size"].set_int64_param(320);
         r->clear_raw_input_contents();
       }},
  };
  for (const BadCase& bad : cases) {
    ModelInferRequest request;
    request.set_model_name("mean_pooling");
    AddInput("x", x, &request);
    bad.spoil(&request);
    ModelInferResponse response;
    grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << bad.what << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(bad.says), std::string::npos)
        << bad.what << ": " << status.error_message();
  }
  // The server still serves.
  ModelInferRequest good;
  good.set_model_name("mean_pooling");
  AddInput("x", x, &good);
  ModelInferResponse response;
  EXPECT_TRUE(Infer(good, &response).ok());
}

TEST_F(KServeTest, AnOutputTheCallDoesNotProduceIsInvalidArgument) {
  SameCall call = Attention(DType::kF32, false, -1, 0.0);
  (*call.v2.mutable_parameters())["return_lse"].set_bool_param(false);
  call.v2.add_outputs()->set_name("lse");
  ModelInferResponse response;
  grpc::Status status = Infer(call.v2, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("output 'lse' is not produced"), std::string::npos)
      << status.error_message();
}

TEST_F(KServeTest, StreamAnswersEachRequestAndErrorsInBand) {
  const Tensor x = RandomTensor(DType::kF32, {2, 9, 16}, 21);
  grpc::ClientContext context;
  Deadline(&context);
  auto stream = v2_->ModelStreamInfer(&context);
  std::map<std::string, std::string> sent;
  for (const char* id : {"a", "bad", "c"}) {
    ModelInferRequest request;
    request.set_model_name(std::string(id) == "bad" ? "nope" : "mean_pooling");
    request.set_id(id);
    AddInput("x", x, &request);
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  v1::ExecuteResponse native;
  ASSERT_TRUE(Execute(MeanPoolingRequest(x), &native).ok());
  inference::ModelStreamInferResponse answer;
  int ok = 0;
  int failed = 0;
  while (stream->Read(&answer)) {
    if (answer.error_message().empty()) {
      ++ok;
      ExpectSameOutputs(native, answer.infer_response());
    } else {
      ++failed;
      EXPECT_EQ(answer.infer_response().id(), "bad");
      EXPECT_NE(answer.error_message().find("NOT_FOUND"), std::string::npos)
          << answer.error_message();
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(failed, 1);
}

TEST_F(KServeTest, StatisticsCountSuccessfulCalls) {
  auto stats = [&] {
    grpc::ClientContext context;
    Deadline(&context);
    inference::ModelStatisticsRequest request;
    request.set_name("mean_pooling");
    inference::ModelStatisticsResponse response;
    EXPECT_TRUE(v2_->ModelStatistics(&context, request, &response).ok());
    return response.model_stats(0);
  };
  const inference::ModelStatistics before = stats();
  const Tensor x = RandomTensor(DType::kF32, {1, 4, 8}, 2);
  for (int i = 0; i < 3; ++i) {
    ModelInferRequest request;
    request.set_model_name("mean_pooling");
    AddInput("x", x, &request);
    ModelInferResponse response;
    ASSERT_TRUE(Infer(request, &response).ok());
  }
  const inference::ModelStatistics after = stats();
  EXPECT_EQ(after.name(), "mean_pooling");
  EXPECT_EQ(after.version(), "1");
  EXPECT_EQ(after.inference_count() - before.inference_count(), 3u);
  EXPECT_EQ(after.inference_stats().success().count() - before.inference_stats().success().count(),
            3u);
  EXPECT_GT(after.inference_stats().success().ns(), before.inference_stats().success().ns());
  EXPECT_GT(after.last_inference(), 0u);
}

TEST_F(KServeTest, StatisticsCountABatchAsOneExecutionOfItsItems) {
  auto stats = [&] {
    grpc::ClientContext context;
    Deadline(&context);
    inference::ModelStatisticsRequest request;
    request.set_name("mean_pooling");
    inference::ModelStatisticsResponse response;
    EXPECT_TRUE(v2_->ModelStatistics(&context, request, &response).ok());
    return response.model_stats(0);
  };
  const inference::ModelStatistics before = stats();
  v1::ExecuteBatchRequest batch;
  batch.set_kernel("mean_pooling");
  for (int i = 0; i < 3; ++i) {
    *batch.add_items() = MeanPoolingRequest(RandomTensor(DType::kF32, {1, 4, 8}, 60 + i));
  }
  *batch.add_items() = MeanPoolingRequest(RandomTensor(DType::kF32, {1, 4}, 63));  // bad item
  v1::ExecuteBatchResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  ASSERT_TRUE(native_->ExecuteBatch(&context, batch, &response).ok());
  const inference::ModelStatistics after = stats();
  EXPECT_EQ(after.inference_count() - before.inference_count(), 3u);
  EXPECT_EQ(after.execution_count() - before.execution_count(), 1u);
  EXPECT_EQ(after.inference_stats().success().count() - before.inference_stats().success().count(),
            1u);
}

void Region(ModelInferRequest::InferInputTensor* input, const std::string& region, int64_t offset,
            int64_t bytes) {
  auto& parameters = *input->mutable_parameters();
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_offset"].set_int64_param(offset);
  parameters["shared_memory_byte_size"].set_int64_param(bytes);
}

TEST_F(KServeTest, SystemSharedMemoryInputsAndOutputsEqualTheNativeAnswer) {
  const Tensor x = RandomTensor(DType::kF32, {3, 33, 48}, 41);
  const int64_t in_offset = 4096;
  const int64_t out_offset = 4096 + 64 * 1024;
  const int64_t out_bytes = 3 * 48 * 4;
  ShmObject object(256 * 1024);
  std::memcpy(object.data() + in_offset, x.data(), x.nbytes());
  std::memset(object.data() + out_offset, 0x7f, out_bytes);  // poisoned
  auto unary = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    Deadline(&context);
    return (v2_.get()->*method)(&context, request, response);
  };
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_name("tensors");
  reg.set_key(object.key());
  reg.set_byte_size(256 * 1024);
  inference::SystemSharedMemoryRegisterResponse registered;
  grpc::Status status =
      unary(&GRPCInferenceService::Stub::SystemSharedMemoryRegister, reg, &registered);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(
      unary(&GRPCInferenceService::Stub::SystemSharedMemoryRegister, reg, &registered).error_code(),
      StatusCode::ALREADY_EXISTS);

  ModelInferRequest request;
  request.set_model_name("mean_pooling");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  for (int64_t d : x.shape()) input->add_shape(d);
  Region(input, "tensors", in_offset, static_cast<int64_t>(x.nbytes()));
  auto* output = request.add_outputs();
  output->set_name("out");
  (*output->mutable_parameters())["shared_memory_region"].set_string_param("tensors");
  (*output->mutable_parameters())["shared_memory_offset"].set_int64_param(out_offset);
  (*output->mutable_parameters())["shared_memory_byte_size"].set_int64_param(out_bytes);
  ModelInferResponse v2;
  status = Infer(request, &v2);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(v2.outputs_size(), 1);
  EXPECT_EQ(v2.raw_output_contents(0), "");  // the bytes went to the region
  EXPECT_EQ(v2.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), out_bytes);
  v1::ExecuteResponse native;
  ASSERT_TRUE(Execute(MeanPoolingRequest(x), &native).ok());
  EXPECT_EQ(std::string(object.data() + out_offset, out_bytes), native.outputs().at("out").data());

  // Bad references: each with its code, naming the tensor.
  ModelInferRequest bad = request;
  Region(bad.mutable_inputs(0), "tensors", 255 * 1024, static_cast<int64_t>(x.nbytes()));
  EXPECT_EQ(Infer(bad, &v2).error_code(), StatusCode::INVALID_ARGUMENT);  // past the end
  bad = request;
  Region(bad.mutable_inputs(0), "tensors", in_offset, 100);
  status = Infer(bad, &v2);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);  // not the tensor's size
  EXPECT_NE(status.error_message().find("input 'x'"), std::string::npos) << status.error_message();
  bad = request;
  (*bad.mutable_outputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(8);
  status = Infer(bad, &v2);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);  // the output does not fit
  EXPECT_NE(status.error_message().find("output 'out'"), std::string::npos)
      << status.error_message();

  inference::SystemSharedMemoryStatusResponse listed;
  ASSERT_TRUE(unary(&GRPCInferenceService::Stub::SystemSharedMemoryStatus,
                    inference::SystemSharedMemoryStatusRequest(), &listed)
                  .ok());
  ASSERT_TRUE(listed.regions().contains("tensors"));
  EXPECT_EQ(listed.regions().at("tensors").key(), object.key());
  inference::SystemSharedMemoryUnregisterResponse gone;
  ASSERT_TRUE(unary(&GRPCInferenceService::Stub::SystemSharedMemoryUnregister,
                    inference::SystemSharedMemoryUnregisterRequest(), &gone)
                  .ok());
  EXPECT_EQ(Infer(request, &v2).error_code(), StatusCode::NOT_FOUND);
  reg.set_key("/kernelserve-no-such-object");
  EXPECT_EQ(
      unary(&GRPCInferenceService::Stub::SystemSharedMemoryRegister, reg, &registered).error_code(),
      StatusCode::NOT_FOUND);
  inference::CudaSharedMemoryUnregisterResponse cuda_gone;
  EXPECT_TRUE(unary(&GRPCInferenceService::Stub::CudaSharedMemoryUnregister,
                    inference::CudaSharedMemoryUnregisterRequest(), &cuda_gone)
                  .ok());
}

TEST_F(KServeTest, SystemSharedMemoryOfAShrunkObjectOrABadNameIsInvalidArgument) {
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 5);
  ShmObject object(64 * 1024);
  std::memcpy(object.data() + 40 * 1024, x.data(), x.nbytes());
  auto unary = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    Deadline(&context);
    return (v2_.get()->*method)(&context, request, response);
  };
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_key(object.key());
  reg.set_byte_size(64 * 1024);
  inference::SystemSharedMemoryRegisterResponse registered;
  for (const std::string& name :
       {std::string("a\0b", 3), std::string("line\nbreak"), std::string(200, 'n')}) {
    reg.set_name(name);
    const grpc::Status status =
        unary(&GRPCInferenceService::Stub::SystemSharedMemoryRegister, reg, &registered);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_EQ(status.error_message().find('\n'), std::string::npos) << status.error_message();
  }
  reg.set_name("tensors");
  ASSERT_TRUE(
      unary(&GRPCInferenceService::Stub::SystemSharedMemoryRegister, reg, &registered).ok());

  ModelInferRequest request;
  request.set_model_name("mean_pooling");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  for (int64_t d : x.shape()) input->add_shape(d);
  Region(input, "tensors", 40 * 1024, static_cast<int64_t>(x.nbytes()));
  ModelInferResponse v2;
  ASSERT_TRUE(Infer(request, &v2).ok());
  object.Resize(16 * 1024);  // the client cuts its object
  const grpc::Status status = Infer(request, &v2);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("region 'tensors' (key '" + object.key() +
                                        "') is 16384 bytes now"),
            std::string::npos)
      << status.error_message();
  ASSERT_TRUE(native_ != nullptr);
  v1::ExecuteResponse native;
  EXPECT_TRUE(Execute(MeanPoolingRequest(x), &native).ok()) << "the server lives on";
  inference::SystemSharedMemoryUnregisterResponse gone;
  EXPECT_TRUE(unary(&GRPCInferenceService::Stub::SystemSharedMemoryUnregister,
                    inference::SystemSharedMemoryUnregisterRequest(), &gone)
                  .ok());
}

TEST_F(KServeTest, ReadinessAndUnknownModels) {
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(v2_->ServerLive(&live_context, {}, &live).ok());
  EXPECT_TRUE(live.live());
  grpc::ClientContext ready_context;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(v2_->ServerReady(&ready_context, {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  // A model or version the server lacks is not ready, as Triton answers: OK, ready false.
  struct Case {
    const char* name;
    const char* version;
    bool ready;
  };
  const Case cases[] = {{"mean_pooling", "", true},
                        {"mean_pooling", "1", true},
                        {"flash_attention@v1", "", false},  // the native form names no model
                        {"no_such_model", "", false},
                        {"mean_pooling", "2", false}};
  for (const Case& c : cases) {
    grpc::ClientContext model_context;
    Deadline(&model_context);
    inference::ModelReadyRequest model;
    model.set_name(c.name);
    model.set_version(c.version);
    inference::ModelReadyResponse model_ready;
    const grpc::Status status = v2_->ModelReady(&model_context, model, &model_ready);
    ASSERT_TRUE(status.ok()) << c.name << " " << c.version << ": " << status.error_message();
    EXPECT_EQ(model_ready.ready(), c.ready) << c.name << " " << c.version;
  }
  // The metadata of such a model stays an error.
  grpc::ClientContext metadata_context;
  Deadline(&metadata_context);
  inference::ModelMetadataRequest metadata;
  metadata.set_name("no_such_model");
  inference::ModelMetadataResponse metadata_response;
  EXPECT_EQ(v2_->ModelMetadata(&metadata_context, metadata, &metadata_response).error_code(),
            StatusCode::NOT_FOUND);
}

TEST_F(KServeTest, ModelMetadataAgreesWithListKernels) {
  grpc::ClientContext list_context;
  Deadline(&list_context);
  v1::ListKernelsResponse kernels;
  ASSERT_TRUE(native_->ListKernels(&list_context, {}, &kernels).ok());
  ASSERT_GE(kernels.kernels_size(), 2);
  for (const v1::KernelInfo& kernel : kernels.kernels()) {
    grpc::ClientContext context;
    Deadline(&context);
    inference::ModelMetadataRequest request;
    request.set_name(kernel.name());
    inference::ModelMetadataResponse metadata;
    ASSERT_TRUE(v2_->ModelMetadata(&context, request, &metadata).ok()) << kernel.name();
    ASSERT_EQ(metadata.inputs_size(), kernel.input_schema_size()) << kernel.name();
    for (int i = 0; i < metadata.inputs_size(); ++i) {
      const auto& listed = metadata.inputs(i);
      const v1::InputInfo& input = kernel.input_schema(i);
      EXPECT_EQ(listed.name(), input.name());
      // The listed datatype and rank are among those the kernel takes.
      bool dtype_taken = false;
      for (int d : input.dtypes()) {
        absl::StatusOr<DType> dtype = FromProto(static_cast<v1::DType>(d), input.name());
        dtype_taken |= dtype.ok() && listed.datatype() == Datatype(*dtype);
      }
      EXPECT_TRUE(dtype_taken) << kernel.name() << " " << input.name() << " " << listed.datatype();
      EXPECT_NE(std::find(input.ranks().begin(), input.ranks().end(), listed.shape_size()),
                input.ranks().end())
          << kernel.name() << " " << input.name();
    }
    ASSERT_EQ(metadata.outputs_size(), kernel.output_schema_size());
    for (int i = 0; i < metadata.outputs_size(); ++i) {
      EXPECT_EQ(metadata.outputs(i).name(), kernel.output_schema(i).name());
    }
  }
}

}  // namespace
}  // namespace kernelserve::testing
