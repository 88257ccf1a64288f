// proto/kserve_convert.h, the answer side: kserve::ToInferResponse writes a ModelInferResponse's
// wire bytes by hand, so every test parses them with protobuf's own parser of the published
// message and checks each field.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/kserve_convert.h"
#include "proto/parse.h"

namespace kernelserve::kserve {
namespace {

using google::protobuf::util::MessageDifferencer;
using inference::InferParameter;
using inference::ModelInferResponse;

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (char& c : s) {
    seed = seed * 1664525u + 1013904223u;
    c = static_cast<char>(seed >> 24);
  }
  return s;
}

KernelSchema TwoOutputs() {
  KernelSchema schema;
  schema.name = "toy";
  schema.outputs = {{"out", "dtype of x", "[B,D]", ""}, {"lse", "f32", "[B]", "when asked"}};
  return schema;
}

v1::Tensor MakeTensor(v1::DType dtype, std::vector<int64_t> shape, std::string data) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}

// An answer as RunCall leaves it, with every field set (device -1: a negative varint).
v1::ExecuteResponse Answer(size_t out_rows) {
  v1::ExecuteResponse r;
  (*r.mutable_outputs())["out"] =
      MakeTensor(v1::DTYPE_F16, {static_cast<int64_t>(out_rows), 3}, Bytes(out_rows * 6, 1));
  (*r.mutable_outputs())["lse"] =
      MakeTensor(v1::DTYPE_F32, {static_cast<int64_t>(out_rows)}, Bytes(out_rows * 4, 2));
  r.mutable_config()->set_block_size(64);
  r.set_config_source(v1::CONFIG_SOURCE_AUTOTUNE);
  r.set_platform("cpu");
  r.set_device(-1);
  r.set_device_fingerprint("cpu:test");
  r.set_cache_key("toy@v1|cpu|x=f16[2,3]");
  v1::Timing* t = r.mutable_timing();
  t->set_queue_us(11);
  t->set_select_us(12);
  t->set_h2d_us(13);
  t->set_kernel_us(14);
  t->set_launch_us(17);
  t->set_d2h_us(15);
  t->set_total_us(16);
  t->set_recv_us(17);
  r.add_warnings("first");
  r.add_warnings("second");
  return r;
}

ModelInferResponse Parsed(WireMessage message) {
  grpc::ByteBuffer buffer = message.ToByteBuffer();
  EXPECT_EQ(buffer.Length(), message.bytes);
  ModelInferResponse parsed;
  EXPECT_TRUE(wire::ParseRequest(&buffer, &parsed).ok());
  return parsed;
}

TEST(KServeAnswerTest, EveryFieldParsesAsTheProtocolsMessage) {
  v1::ExecuteResponse answer = Answer(2);
  const v1::ExecuteResponse sent = answer;
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "req-7");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const ModelInferResponse r = Parsed(*std::move(bytes));
  EXPECT_EQ(r.model_name(), "toy");
  EXPECT_EQ(r.model_version(), "1");
  EXPECT_EQ(r.id(), "req-7");
  ASSERT_EQ(r.outputs_size(), 2);  // the schema's order
  EXPECT_EQ(r.outputs(0).name(), "out");
  EXPECT_EQ(r.outputs(0).datatype(), "FP16");
  EXPECT_EQ(std::vector<int64_t>(r.outputs(0).shape().begin(), r.outputs(0).shape().end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(r.outputs(0).parameters().empty());
  EXPECT_EQ(r.outputs(1).name(), "lse");
  EXPECT_EQ(r.outputs(1).datatype(), "FP32");
  ASSERT_EQ(r.raw_output_contents_size(), 2);
  EXPECT_EQ(r.raw_output_contents(0), sent.outputs().at("out").data());
  EXPECT_EQ(r.raw_output_contents(1), sent.outputs().at("lse").data());

  const auto& p = r.parameters();
  EXPECT_EQ(p.size(), 15u);
  auto string_of = [&p](const std::string& key) {
    EXPECT_EQ(p.at(key).parameter_choice_case(), InferParameter::kStringParam) << key;
    return p.at(key).string_param();
  };
  auto int_of = [&p](const std::string& key) {
    EXPECT_EQ(p.at(key).parameter_choice_case(), InferParameter::kInt64Param) << key;
    return p.at(key).int64_param();
  };
  EXPECT_EQ(string_of("config_source"), "autotune");
  EXPECT_EQ(string_of("cache_key"), "toy@v1|cpu|x=f16[2,3]");
  EXPECT_EQ(string_of("platform"), "cpu");
  EXPECT_EQ(int_of("device"), -1);
  EXPECT_EQ(string_of("device_fingerprint"), "cpu:test");
  EXPECT_NE(string_of("config").find("\"block_size\""), std::string::npos);
  EXPECT_EQ(int_of("queue_us"), 11);
  EXPECT_EQ(int_of("select_us"), 12);
  EXPECT_EQ(int_of("h2d_us"), 13);
  EXPECT_EQ(int_of("kernel_us"), 14);
  EXPECT_EQ(int_of("launch_us"), 17);
  EXPECT_EQ(int_of("d2h_us"), 15);
  EXPECT_EQ(int_of("total_us"), 16);
  EXPECT_EQ(int_of("recv_us"), 17);
  EXPECT_EQ(string_of("warnings"), "first\nsecond");
}

TEST(KServeAnswerTest, OnlyTheOutputsAskedForAndNoIdWhenNoneWasGiven) {
  v1::ExecuteResponse answer = Answer(3);
  answer.clear_warnings();
  const std::string lse = answer.outputs().at("lse").data();
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {"lse"}, "");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const ModelInferResponse r = Parsed(*std::move(bytes));
  EXPECT_EQ(r.id(), "");
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "lse");
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  EXPECT_EQ(r.raw_output_contents(0), lse);
  EXPECT_FALSE(r.parameters().contains("warnings"));
  EXPECT_EQ(r.parameters().size(), 14u);
}

TEST(KServeAnswerTest, AnOutputAskedForThatTheCallDidNotProduceIsInvalidArgument) {
  v1::ExecuteResponse answer = Answer(1);
  answer.mutable_outputs()->erase("lse");
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {"out", "lse"}, "");
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("'lse'"), std::string::npos);
}

TEST(KServeAnswerTest, AnOutputInSharedMemoryHasAnEmptyRawEntryAndItsRegion) {
  v1::ExecuteResponse answer = Answer(4);
  const std::string lse = answer.outputs().at("lse").data();
  RegionRefs regions;
  regions["out"] = RegionRef{"region-a", 256, 0};
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "", regions);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const ModelInferResponse r = Parsed(*std::move(bytes));
  ASSERT_EQ(r.outputs_size(), 2);
  const auto& p = r.outputs(0).parameters();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("shared_memory_region").string_param(), "region-a");
  EXPECT_EQ(p.at("shared_memory_offset").int64_param(), 256);
  EXPECT_EQ(p.at("shared_memory_byte_size").int64_param(), 4 * 3 * 2);  // f16 [4,3]
  ASSERT_EQ(r.raw_output_contents_size(), 2);
  EXPECT_EQ(r.raw_output_contents(0), "");
  EXPECT_EQ(r.raw_output_contents(1), lse);
}

TEST(KServeAnswerTest, LargeOutputBytesAreSentFromTheirStringWithoutACopy) {
  v1::ExecuteResponse answer = Answer(100000);  // out: 600 kB, lse: 400 kB
  const std::string out = answer.outputs().at("out").data();
  const char* out_bytes = answer.outputs().at("out").data().data();
  const char* lse_bytes = answer.outputs().at("lse").data().data();
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<const void*> starts;
  for (const grpc::Slice& slice : bytes->slices) starts.push_back(slice.begin());
  EXPECT_NE(std::find(starts.begin(), starts.end(), out_bytes), starts.end());
  EXPECT_NE(std::find(starts.begin(), starts.end(), lse_bytes), starts.end());
  const ModelInferResponse r = Parsed(*std::move(bytes));
  ASSERT_EQ(r.raw_output_contents_size(), 2);
  EXPECT_EQ(r.raw_output_contents(0), out);
  EXPECT_EQ(r.raw_output_contents(1).size(), 400000u);
}

// `bytes` in a heap HostBuffer (standing in for a pinned one).
std::shared_ptr<HostBuffer> Held(const std::string& bytes) {
  void* data = std::malloc(bytes.size());
  std::memcpy(data, bytes.data(), bytes.size());
  return std::make_shared<HostBuffer>(data, bytes.size(), /*pinned=*/false,
                                      [](void* p) { std::free(p); });
}

TEST(KServeAnswerTest, OutputsInHostBuffersAreSentFromTheBuffersWithoutACopy) {
  // As Run leaves outputs it keeps in buffers: the tensor's data empty, its buffer listed.
  v1::ExecuteResponse answer = Answer(100000);  // out: 600 kB (in a buffer), lse: 400 kB
  const v1::ExecuteResponse expected_answer = answer;
  wire::TensorBuffers buffers;
  v1::Tensor& out = (*answer.mutable_outputs())["out"];
  std::shared_ptr<HostBuffer> held = Held(out.data());
  out.clear_data();
  buffers[&out] = held;
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "", {}, &buffers);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<const void*> starts;
  for (const grpc::Slice& slice : bytes->slices) starts.push_back(slice.begin());
  EXPECT_NE(std::find(starts.begin(), starts.end(), held->data()), starts.end());
  buffers.clear();
  EXPECT_GT(held.use_count(), 1);  // the slice holds the buffer
  const ModelInferResponse r = Parsed(*std::move(bytes));
  ASSERT_EQ(r.raw_output_contents_size(), 2);
  EXPECT_EQ(r.raw_output_contents(0), expected_answer.outputs().at("out").data());
  EXPECT_EQ(r.raw_output_contents(1), expected_answer.outputs().at("lse").data());
  EXPECT_EQ(r.outputs(0).shape(0), 100000);
}

TEST(KServeAnswerTest, SmallOutputsInHostBuffersAreCopiedIntoTheAnswer) {
  v1::ExecuteResponse answer = Answer(2);
  const v1::ExecuteResponse expected_answer = answer;
  wire::TensorBuffers buffers;
  v1::Tensor& lse = (*answer.mutable_outputs())["lse"];
  buffers[&lse] = Held(lse.data());
  lse.clear_data();
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "", {}, &buffers);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const ModelInferResponse r = Parsed(*std::move(bytes));
  ASSERT_EQ(r.raw_output_contents_size(), 2);
  EXPECT_EQ(r.raw_output_contents(1), expected_answer.outputs().at("lse").data());
}

TEST(KServeAnswerTest, NestedAsTheStreamsInferResponse) {
  v1::ExecuteResponse answer = Answer(2);
  v1::ExecuteResponse again = answer;
  absl::StatusOr<WireMessage> bytes = ToInferResponse(&answer, TwoOutputs(), {}, "s-1");
  ASSERT_TRUE(bytes.ok());
  NestAs(inference::ModelStreamInferResponse::kInferResponseFieldNumber, &*bytes);
  grpc::ByteBuffer buffer = bytes->ToByteBuffer();
  EXPECT_EQ(buffer.Length(), bytes->bytes);
  inference::ModelStreamInferResponse stream;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &stream).ok());
  EXPECT_EQ(stream.error_message(), "");
  const ModelInferResponse direct = Parsed(*ToInferResponse(&again, TwoOutputs(), {}, "s-1"));
  EXPECT_TRUE(MessageDifferencer::Equals(stream.infer_response(), direct));
  EXPECT_EQ(stream.infer_response().id(), "s-1");
}

}  // namespace
}  // namespace kernelserve::kserve
