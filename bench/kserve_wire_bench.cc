// What the KServe v2 front door adds to a tiny call on the CPU (Google Benchmark), with the
// native API's parse and serialize beside it: mean_pooling x = f32 [1,16,64] in, f32 [1,64]
// out, the request from its received bytes to the kernel's TensorMap and the answer from the
// executor's response to the bytes gRPC sends. Run: build/bench/kernelserve-kserve-wire-bench
#include <benchmark/benchmark.h>
#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>

#include <random>
#include <string>

#include "core/executor.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "kernels/register.h"
#include "proto/convert.h"
#include "proto/kserve_convert.h"
#include "proto/parse.h"

namespace kernelserve {
namespace {

std::string RandomBytes(size_t n) {
  std::mt19937 rng(7);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

template <typename Message>
grpc::ByteBuffer Serialized(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  (void)grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own);
  return buffer;
}

struct Setup {
  KernelRegistry registry;
  const KernelSchema* schema = nullptr;
  grpc::ByteBuffer native_request;
  grpc::ByteBuffer v2_request;
  v1::ExecuteResponse answer;  // as RunCall leaves it for the tiny call

  Setup() {
    (void)RegisterBuiltinKernels(&registry);
    schema = &(*registry.Find("mean_pooling"))->schema();
    const std::string x = RandomBytes(16 * 64 * 4);
    v1::ExecuteRequest native;
    native.set_kernel("mean_pooling");
    v1::Tensor& tensor = (*native.mutable_inputs())["x"];
    tensor.set_dtype(v1::DTYPE_F32);
    for (int64_t d : {1, 16, 64}) tensor.add_shape(d);
    tensor.set_data(x);
    native_request = Serialized(native);

    inference::ModelInferRequest v2;
    v2.set_model_name("mean_pooling");
    inference::ModelInferRequest::InferInputTensor* input = v2.add_inputs();
    input->set_name("x");
    input->set_datatype("FP32");
    for (int64_t d : {1, 16, 64}) input->add_shape(d);
    v2.add_raw_input_contents(x);
    v2_request = Serialized(v2);

    v1::Tensor& out = (*answer.mutable_outputs())[schema->outputs.front().name];
    out.set_dtype(v1::DTYPE_F32);
    out.add_shape(1);
    out.add_shape(64);
    out.set_data(RandomBytes(64 * 4));
    answer.mutable_config()->set_block_size(64);
    (*answer.mutable_config()->mutable_fields())["threads"] = 1;
    answer.set_config_source(v1::CONFIG_SOURCE_MEMORY);
    answer.set_platform("cpu");
    answer.set_device(-1);
    answer.set_device_fingerprint("cpu:x86_64:2-threads");
    answer.set_cache_key("mean_pooling@v1|cpu|x=f32[1,16,64]|reduce=mean|cpu:x86_64:2-threads");
    v1::Timing* t = answer.mutable_timing();
    t->set_queue_us(12);
    t->set_select_us(1);
    t->set_kernel_us(3);
    t->set_total_us(6);
    t->set_recv_us(2);
  }
};

Setup& TheSetup() {
  static Setup* setup = new Setup();
  return *setup;
}

void BM_NativeRequest(benchmark::State& state) {
  Setup& s = TheSetup();
  for (auto _ : state) {
    grpc::ByteBuffer received(s.native_request);
    v1::ExecuteRequest request;
    if (!wire::ParseRequest(&received, &request).ok()) state.SkipWithError("parse");
    absl::StatusOr<TensorMap> inputs = TakeTensors(request.mutable_inputs());
    benchmark::DoNotOptimize(inputs);
  }
}
BENCHMARK(BM_NativeRequest);

void BM_V2Request(benchmark::State& state) {
  Setup& s = TheSetup();
  for (auto _ : state) {
    grpc::ByteBuffer received(s.v2_request);
    inference::ModelInferRequest request;
    if (!wire::ParseRequest(&received, &request).ok()) state.SkipWithError("parse");
    absl::StatusOr<kserve::InferCall> call = kserve::FromInferRequest(&request, *s.schema);
    if (!call.ok()) state.SkipWithError("convert");
    absl::StatusOr<TensorMap> inputs = TakeTensors(call->request.mutable_inputs());
    benchmark::DoNotOptimize(inputs);
  }
}
BENCHMARK(BM_V2Request);

void BM_NativeResponse(benchmark::State& state) {
  Setup& s = TheSetup();
  for (auto _ : state) {
    v1::ExecuteResponse answer = s.answer;
    grpc::ByteBuffer sent = Serialized(answer);
    benchmark::DoNotOptimize(sent);
  }
}
BENCHMARK(BM_NativeResponse);

void BM_V2Response(benchmark::State& state) {
  Setup& s = TheSetup();
  for (auto _ : state) {
    v1::ExecuteResponse answer = s.answer;
    absl::StatusOr<kserve::WireMessage> bytes = kserve::ToInferResponse(&answer, *s.schema, {}, "");
    if (!bytes.ok()) state.SkipWithError("convert");
    grpc::ByteBuffer sent = bytes->ToByteBuffer();
    benchmark::DoNotOptimize(sent);
  }
}
BENCHMARK(BM_V2Response);

// The same answer built as the published ModelInferResponse, its parameters in a protobuf map,
// and serialized by protobuf (what the server did before it wrote the bytes itself).
void BM_V2ResponseAsMap(benchmark::State& state) {
  Setup& s = TheSetup();
  v1::ExecuteResponse first = s.answer;
  const absl::StatusOr<kserve::WireMessage> bytes =
      kserve::ToInferResponse(&first, *s.schema, {}, "");
  grpc::ByteBuffer buffer = bytes->ToByteBuffer();
  inference::ModelInferResponse model;
  if (!wire::ParseRequest(&buffer, &model).ok()) state.SkipWithError("parse");
  for (auto _ : state) {
    v1::ExecuteResponse answer = s.answer;
    inference::ModelInferResponse out;
    out.set_model_name(model.model_name());
    out.set_model_version(model.model_version());
    *out.mutable_outputs() = model.outputs();
    out.add_raw_output_contents()->swap(*answer.mutable_outputs()->begin()->second.mutable_data());
    for (const auto& [key, value] : model.parameters()) (*out.mutable_parameters())[key] = value;
    grpc::ByteBuffer sent = Serialized(out);
    benchmark::DoNotOptimize(sent);
  }
}
BENCHMARK(BM_V2ResponseAsMap);

// The client's side of the same call: the request serialized, the answer parsed.
void BM_NativeClient(benchmark::State& state) {
  Setup& s = TheSetup();
  grpc::ByteBuffer copy(s.native_request);
  auto request = std::make_shared<v1::ExecuteRequest>();
  (void)wire::ParseRequest(&copy, request.get());
  v1::ExecuteResponse first = s.answer;
  const grpc::ByteBuffer answer = Serialized(first);
  for (auto _ : state) {
    grpc::ByteBuffer sent;
    (void)wire::SerializeShared(request, &sent);
    grpc::ByteBuffer received(answer);
    v1::ExecuteResponse response;
    if (!wire::ParseRequest(&received, &response).ok()) state.SkipWithError("parse");
    benchmark::DoNotOptimize(response);
  }
}
BENCHMARK(BM_NativeClient);

// The client's side of a v2 call; `arena` = parse the answer on a protobuf arena.
void V2Client(benchmark::State& state, bool arena) {
  Setup& s = TheSetup();
  grpc::ByteBuffer copy(s.v2_request);
  inference::ModelInferRequest request;
  (void)wire::ParseRequest(&copy, &request);
  v1::ExecuteResponse first = s.answer;
  const absl::StatusOr<kserve::WireMessage> bytes =
      kserve::ToInferResponse(&first, *s.schema, {}, "");
  const grpc::ByteBuffer answer = bytes->ToByteBuffer();
  for (auto _ : state) {
    grpc::ByteBuffer sent = Serialized(request);
    grpc::ByteBuffer received(answer);
    google::protobuf::Arena on;
    inference::ModelInferResponse plain;
    auto* response =
        arena ? google::protobuf::Arena::CreateMessage<inference::ModelInferResponse>(&on) : &plain;
    if (!wire::ParseRequest(&received, response).ok()) state.SkipWithError("parse");
    benchmark::DoNotOptimize(response);
  }
}

void BM_V2Client(benchmark::State& state) { V2Client(state, /*arena=*/false); }
BENCHMARK(BM_V2Client);

void BM_V2ClientArena(benchmark::State& state) { V2Client(state, /*arena=*/true); }
BENCHMARK(BM_V2ClientArena);

}  // namespace
}  // namespace kernelserve

BENCHMARK_MAIN();
