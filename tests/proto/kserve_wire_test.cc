// proto/tensor_wire.h on the KServe v2 request: the extracting parse of a ModelInferRequest
// (its raw_input_contents copied from the slices once, into allocator buffers or exact-size
// strings) must give exactly what protobuf's own parse gives, for random small and large
// messages, repeated raw entries, fields after and between the entries, and malformed bytes
// (an error, never a crash); kserve::FromInferRequest and ToInferResponse then take and send the
// buffered bytes without copies.
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/host_pool.h"
#include "gtest/gtest.h"
#include "proto/kserve_convert.h"
#include "proto/kserve_request_wire.h"
#include "proto/parse.h"
#include "proto/tensor_wire.h"
#include "tests/proto/wire_test_data.h"

namespace kernelserve {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::inference::ModelInferRequest;
using ::kernelserve::testing::WireBytes;

constexpr size_t kMiB = size_t{1} << 20;

// A pool over malloc (standing in for page-locked memory), 1 MiB minimum.
HostPoolOptions HeapPool(size_t limit) {
  HostPoolOptions o;
  o.limit_bytes = limit;
  o.allocate = [](size_t n) { return std::malloc(n); };
  o.free = [](void* p) { std::free(p); };
  return o;
}

// `wire` cut into slices of `slice_bytes` (0 = one slice), as gRPC's reads deliver it.
grpc::ByteBuffer Buffer(const std::string& wire, size_t slice_bytes = 0) {
  if (slice_bytes == 0) slice_bytes = std::max<size_t>(wire.size(), 1);
  std::vector<grpc::Slice> slices;
  for (size_t off = 0; off < wire.size(); off += slice_bytes) {
    slices.emplace_back(wire.data() + off, std::min(slice_bytes, wire.size() - off));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// A request with `sizes.size()` FP32 inputs, raw entries of those sizes, parameters and
// outputs, from `seed`.
ModelInferRequest RandomRequest(const std::vector<size_t>& sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  ModelInferRequest r;
  r.set_model_name("mean_pooling");
  r.set_model_version(rng() % 2 ? "1" : "");
  r.set_id("req-" + std::to_string(rng()));
  (*r.mutable_parameters())["chunk_size"].set_int64_param(static_cast<int64_t>(rng() % 64));
  (*r.mutable_parameters())["note"].set_string_param(std::string(rng() % 40, 'n'));
  for (size_t i = 0; i < sizes.size(); ++i) {
    ModelInferRequest::InferInputTensor* input = r.add_inputs();
    input->set_name("in" + std::to_string(i));
    input->set_datatype("FP32");
    input->add_shape(static_cast<int64_t>(sizes[i] / 4));
    if (rng() % 3 == 0) (*input->mutable_parameters())["binary_data_size"].set_int64_param(7);
    r.add_raw_input_contents(WireBytes(sizes[i], seed + static_cast<uint32_t>(i)));
  }
  r.add_outputs()->set_name("out");
  return r;
}

// Parses `wire` with the extracting parser (with `allocator`, nullable) and through
// wire::Deserialize, and expects exactly what protobuf's parser gives; the bytes of entries
// in buffers are compared with protobuf's entries. Returns the buffers of the extracting parse.
wire::RawBuffers ExpectParsesAsProtobuf(const std::string& wire, HostAllocator* allocator,
                                        size_t slice_bytes = 0) {
  ModelInferRequest expected;
  EXPECT_TRUE(expected.ParseFromString(wire));
  grpc::ByteBuffer buffer = Buffer(wire, slice_bytes);
  ModelInferRequest extracted;
  wire::RawBuffers buffers;
  EXPECT_TRUE(wire::ParseExtracting(&buffer, &extracted, allocator, &buffers));
  EXPECT_EQ(extracted.raw_input_contents_size(), expected.raw_input_contents_size());
  EXPECT_TRUE(buffers.empty() ||
              buffers.size() == static_cast<size_t>(extracted.raw_input_contents_size()));
  ModelInferRequest restored = extracted;  // the buffered bytes put back, to compare
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) continue;
    EXPECT_TRUE(extracted.raw_input_contents(static_cast<int>(i)).empty());
    restored.set_raw_input_contents(
        static_cast<int>(i),
        std::string(static_cast<const char*>(buffers[i]->data()), buffers[i]->size()));
  }
  EXPECT_TRUE(MessageDifferencer::Equals(restored, expected));

  grpc::ByteBuffer again = Buffer(wire, slice_bytes);
  ModelInferRequest deserialized;
  const grpc::Status status = wire::Deserialize(&again, &deserialized);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(MessageDifferencer::Equals(deserialized, expected));
  return buffers;
}

std::string Varint(uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out.push_back(static_cast<char>((value & 0x7f) | 0x80));
  out.push_back(static_cast<char>(value));
  return out;
}

std::string Delimited(int number, const std::string& payload) {
  return Varint((static_cast<uint64_t>(number) << 3) | 2) + Varint(payload.size()) + payload;
}

std::string Raw(const std::string& bytes) {
  return Delimited(ModelInferRequest::kRawInputContentsFieldNumber, bytes);
}

TEST(KServeWireTest, RandomSmallAndLargeRequestsParseAsProtobufDoes) {
  std::mt19937 rng(11);
  for (int round = 0; round < 24; ++round) {
    std::vector<size_t> sizes(1 + rng() % 4);
    for (size_t& size : sizes) {
      const uint32_t kind = rng() % 4;  // empty, small, around 1 MiB, a few MiB
      size = kind == 0   ? 0
             : kind == 1 ? rng() % 5000
             : kind == 2 ? kMiB - 8 + rng() % 16
                         : kMiB + rng() % (3 * kMiB);
    }
    const std::string wire = RandomRequest(sizes, static_cast<uint32_t>(round)).SerializeAsString();
    SCOPED_TRACE(::testing::Message() << "round " << round << ", " << wire.size() << " bytes");
    HostBufferPool pool(HeapPool(64 * kMiB));
    ExpectParsesAsProtobuf(wire, nullptr, round % 2 ? 4096 : 0);
    const wire::RawBuffers buffers = ExpectParsesAsProtobuf(wire, &pool, round % 3 ? 16384 : 0);
    for (size_t i = 0; i < sizes.size(); ++i) {
      // The pool gives a buffer for every entry of its 1 MiB minimum or more, and no other.
      const bool buffered = i < buffers.size() && buffers[i] != nullptr;
      EXPECT_EQ(buffered, sizes[i] >= kMiB) << "entry " << i << " of " << sizes[i] << " bytes";
    }
  }
}

TEST(KServeWireTest, LargeEntriesGoIntoTheAllocatorsBuffersOnce) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  const ModelInferRequest sent = RandomRequest({3 * kMiB, 100, 2 * kMiB + 4}, 5);
  grpc::ByteBuffer buffer = Buffer(sent.SerializeAsString(), 8192);
  ModelInferRequest got;
  wire::RawBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(pool.stats().allocations, 2);
  ASSERT_NE(buffers[0], nullptr);
  EXPECT_EQ(buffers[1], nullptr);
  ASSERT_NE(buffers[2], nullptr);
  EXPECT_TRUE(got.raw_input_contents(0).empty());
  EXPECT_EQ(got.raw_input_contents(1), sent.raw_input_contents(1));
  EXPECT_TRUE(got.raw_input_contents(2).empty());
  EXPECT_EQ(std::string(static_cast<const char*>(buffers[2]->data()), buffers[2]->size()),
            sent.raw_input_contents(2));
  EXPECT_EQ(got.id(), sent.id());

  // Without a list for them, no buffer is taken: the bytes stay in the message.
  grpc::ByteBuffer again = Buffer(sent.SerializeAsString(), 8192);
  ModelInferRequest whole;
  ASSERT_TRUE(wire::Deserialize(&again, &whole, &pool, nullptr).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(whole, sent));
  EXPECT_EQ(pool.stats().allocations, 2);
}

TEST(KServeWireTest, FieldsAfterAndBetweenTheRawEntriesParseAsProtobufDoes) {
  // Protobuf writes raw_input_contents (field 7) last; other writers need not. Entries between
  // the other fields, the model named twice (the last wins), an input after the data.
  ModelInferRequest head = RandomRequest({}, 3);
  ModelInferRequest::InferInputTensor later;
  later.set_name("late");
  later.set_datatype("FP32");
  later.add_shape(1);
  const std::string wire =
      Raw(WireBytes(2 * kMiB, 1)) + head.SerializeAsString() + Raw(WireBytes(12, 2)) +
      Delimited(ModelInferRequest::kModelNameFieldNumber, "flash_attention") +
      Raw(WireBytes(kMiB + 3, 3)) +
      Delimited(ModelInferRequest::kInputsFieldNumber, later.SerializeAsString()) + Raw("");
  HostBufferPool pool(HeapPool(64 * kMiB));
  ExpectParsesAsProtobuf(wire, nullptr);
  const wire::RawBuffers buffers = ExpectParsesAsProtobuf(wire, &pool, 4096);
  ASSERT_EQ(buffers.size(), 4u);
  EXPECT_NE(buffers[0], nullptr);
  EXPECT_EQ(buffers[1], nullptr);
  EXPECT_NE(buffers[2], nullptr);
  EXPECT_EQ(buffers[3], nullptr);
}

TEST(KServeWireTest, UnknownFieldsAreKeptAsProtobufKeepsThem) {
  ModelInferRequest sent = RandomRequest({2 * kMiB}, 9);
  sent.GetReflection()->MutableUnknownFields(&sent)->AddVarint(99, 5);
  sent.GetReflection()->MutableUnknownFields(&sent)->AddLengthDelimited(100, "unknown");
  ExpectParsesAsProtobuf(sent.SerializeAsString() + Delimited(101, "after"), nullptr);
}

// `wire` as wire::Deserialize takes it: OK and equal to protobuf's parse exactly when protobuf
// parses it, an error otherwise.
void ExpectSameOutcome(const std::string& wire) {
  ModelInferRequest expected;
  const bool parses = expected.ParseFromString(wire);
  grpc::ByteBuffer buffer = Buffer(wire, 4096);
  ModelInferRequest got;
  HostBufferPool pool(HeapPool(64 * kMiB));
  wire::RawBuffers buffers;
  const grpc::Status status = wire::Deserialize(&buffer, &got, &pool, &buffers);
  ASSERT_EQ(status.ok(), parses) << status.error_message();
  if (!parses) return;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) continue;
    got.set_raw_input_contents(
        static_cast<int>(i),
        std::string(static_cast<const char*>(buffers[i]->data()), buffers[i]->size()));
  }
  EXPECT_TRUE(MessageDifferencer::Equals(got, expected));
}

TEST(KServeWireTest, MalformedLargeRequestsFailAsProtobufDoes) {
  const std::string wire = RandomRequest({2 * kMiB, 64}, 4).SerializeAsString();
  ExpectSameOutcome(wire.substr(0, wire.size() - 100));  // truncated in the last entry
  ExpectSameOutcome(wire.substr(0, wire.size() - 30));   // truncated in the small one
  // An entry's length in 6 bytes (protobuf reads at most 5).
  ExpectSameOutcome(wire + "\x3a" + std::string("\x80\x80\x80\x80\x80\x00", 6));
  // A length past the end.
  ExpectSameOutcome(wire + "\x3a" + Varint(5000) + "abc");
  // The marker's field number sent by the client: parsed by protobuf (left unknown).
  ExpectSameOutcome(wire + Varint(uint64_t{(1u << 29) - 1} << 3) + Varint(0));
  // A string parameter that is not UTF-8 (protobuf refuses a proto3 string of it).
  inference::InferParameter bad_string;
  bad_string.set_string_param("ok");
  std::string param = bad_string.SerializeAsString();
  param.back() = '\xff';
  ExpectSameOutcome(Delimited(ModelInferRequest::kParametersFieldNumber,
                              Delimited(1, "p") + Delimited(2, param)) +
                    wire);
  // Group wire types and a zero tag.
  ExpectSameOutcome(wire + "\x0b\x0c");
  ExpectSameOutcome(wire + std::string("\x00", 1));
}

TEST(KServeWireTest, CorruptedLargeRequestsNeverCrashAndMatchProtobuf) {
  const std::string wire = RandomRequest({kMiB + 77, 300, kMiB}, 8).SerializeAsString();
  std::mt19937 rng(21);
  for (int round = 0; round < 200; ++round) {
    std::string bad = wire;
    // Flip bytes where the structure is: the head of the message and around the entries.
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % 2 ? rng() % 400 : (kMiB + 60 + rng() % 700) % bad.size();
      bad[at] = static_cast<char>(rng());
    }
    SCOPED_TRACE(::testing::Message() << "round " << round);
    ExpectSameOutcome(bad);
  }
}

TEST(KServeWireTest, FromInferRequestTakesBufferedEntriesWithoutACopy) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  ModelInferRequest sent;
  sent.set_model_name("mean_pooling");
  ModelInferRequest::InferInputTensor* x = sent.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  for (int64_t d : {4, 256, 256}) x->add_shape(d);
  sent.add_raw_input_contents(WireBytes(4 * 256 * 256 * 4, 2));
  grpc::ByteBuffer buffer = Buffer(sent.SerializeAsString(), 4096);
  ModelInferRequest got;
  wire::RawBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  ASSERT_EQ(buffers.size(), 1u);
  ASSERT_NE(buffers[0], nullptr);
  KernelSchema schema;
  schema.name = "mean_pooling";
  schema.inputs.push_back(InputSchema{.name = "x"});
  absl::StatusOr<kserve::InferCall> call = kserve::FromInferRequest(&got, schema, &buffers);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->input_buffers.size(), 1u);
  EXPECT_EQ(call->input_buffers.at("x"), buffers[0]);  // the same buffer, not a copy
  EXPECT_TRUE(call->request.inputs().at("x").data().empty());
  EXPECT_EQ(call->request.inputs().at("x").shape_size(), 3);
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

TEST(KServeWireTest, SerializeInferRequestSendsLargeRawEntriesFromTheRequest) {
  // Every field of the message set (unknown ones too), raw entries large and small.
  auto request =
      std::make_shared<ModelInferRequest>(RandomRequest({2 * kMiB, 100, 0, 64 << 10}, 3));
  request->set_model_version("1");
  request->mutable_outputs(0)->mutable_parameters()->insert({"binary_data", {}});
  request->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.5f);
  request->GetReflection()->MutableUnknownFields(request.get())->AddVarint(99, 5);
  const ModelInferRequest expected = *request;
  const char* large = request->raw_input_contents(0).data();
  const char* medium = request->raw_input_contents(3).data();
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(wire::SerializeInferRequest(request, &buffer).ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  std::vector<const void*> starts;
  for (const grpc::Slice& slice : slices) starts.push_back(slice.begin());
  EXPECT_NE(std::find(starts.begin(), starts.end(), large), starts.end());
  EXPECT_NE(std::find(starts.begin(), starts.end(), medium), starts.end());
  std::weak_ptr<ModelInferRequest> held = request;
  request.reset();
  EXPECT_FALSE(held.expired());  // the slices hold the request
  ModelInferRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, expected));
  buffer.Clear();
  slices.clear();
  EXPECT_TRUE(held.expired());
}

}  // namespace
}  // namespace kernelserve
