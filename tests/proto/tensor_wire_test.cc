// proto/tensor_wire.h: the gRPC serialization traits of the messages that carry tensors. Large
// messages must parse to exactly what protobuf's own parser gives, small ones take its path.
#include "proto/tensor_wire.h"

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/proto/wire_test_data.h"

namespace kernelserve {
namespace {

using google::protobuf::util::MessageDifferencer;

using ::kernelserve::testing::WireBytes;
using ::kernelserve::testing::WireTensor;

v1::ExecuteRequest MakeRequest(size_t x_bytes) {
  v1::ExecuteRequest r;
  r.set_kernel("mean_pooling");
  (*r.mutable_inputs())["x"] = WireTensor(x_bytes, 1);
  (*r.mutable_inputs())["cu_seqlens"] = WireTensor(12, 2);
  (*r.mutable_inputs())["mask"] = WireTensor(200 << 10, 3);
  r.mutable_mean_pooling()->set_chunk_size(16);
  r.set_platform("cpu");
  r.mutable_policy()->set_allow_autotune(true);
  r.set_request_id("req-7");
  return r;
}

// Serializes with gRPC's traits for Message (the copy path for requests).
template <typename Message>
grpc::ByteBuffer Serialize(const Message& m) {
  grpc::ByteBuffer buffer;
  bool own = false;
  grpc::Status s = grpc::SerializationTraits<Message>::Serialize(m, &buffer, &own);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return buffer;
}

template <typename Message>
Message Parse(grpc::ByteBuffer* buffer) {
  Message m;
  grpc::Status s = grpc::SerializationTraits<Message>::Deserialize(buffer, &m);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return m;
}

TEST(TensorWireTest, LargeRequestParsesToWhatWasSent) {
  const v1::ExecuteRequest sent = MakeRequest(3 << 20);
  grpc::ByteBuffer buffer = Serialize(sent);
  ASSERT_GE(buffer.Length(), wire::kLargeMessageBytes);
  v1::ExecuteRequest extracted;
  ASSERT_TRUE(wire::ParseExtracting(&buffer, &extracted));  // not the fallback
  EXPECT_TRUE(MessageDifferencer::Equals(extracted, sent));
  EXPECT_EQ(extracted.inputs().at("x").data().capacity(), size_t{3} << 20);  // no regrowth
  const v1::ExecuteRequest got = Parse<v1::ExecuteRequest>(&buffer);
  EXPECT_TRUE(MessageDifferencer::Equals(got, sent));
  EXPECT_TRUE(got.inputs().at("x").GetReflection()->GetUnknownFields(got.inputs().at("x")).empty());
  EXPECT_FALSE(buffer.Valid());  // consumed, as grpc::GenericDeserialize leaves it
}

TEST(TensorWireTest, SmallRequestParsesToWhatWasSent) {
  const v1::ExecuteRequest sent = MakeRequest(4096);
  grpc::ByteBuffer buffer = Serialize(sent);
  ASSERT_LT(buffer.Length(), wire::kLargeMessageBytes);
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteRequest>(&buffer), sent));
}

TEST(TensorWireTest, BatchKeepsItemOrderWithLargeAndSmallItems) {
  v1::ExecuteBatchRequest sent;
  sent.set_kernel("mean_pooling");
  for (size_t bytes : {size_t{2} << 20, size_t{100}, size_t{1} << 20, size_t{8}}) {
    v1::ExecuteRequest* item = sent.add_items();
    (*item->mutable_inputs())["x"] = WireTensor(bytes, static_cast<uint32_t>(bytes));
  }
  grpc::ByteBuffer buffer = Serialize(sent);
  v1::ExecuteBatchRequest extracted;
  ASSERT_TRUE(wire::ParseExtracting(&buffer, &extracted));
  EXPECT_TRUE(MessageDifferencer::Equals(extracted, sent));
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteBatchRequest>(&buffer), sent));
}

TEST(TensorWireTest, LargeResponseIsSentWithoutCopyAndLeavesTheResponseEmpty) {
  v1::ExecuteResponse response;
  (*response.mutable_outputs())["out"] = WireTensor(2 << 20, 9);
  response.set_platform("cpu");
  response.set_cache_key("k");
  const v1::ExecuteResponse sent = response;
  const char* data = response.outputs().at("out").data().data();

  grpc::ByteBuffer buffer = Serialize(response);
  EXPECT_EQ(response.ByteSizeLong(), 0u);  // moved into the buffer's owner
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool aliased = false;  // some slice points at the tensor's own bytes
  for (const grpc::Slice& slice : slices) {
    aliased |= reinterpret_cast<const char*>(slice.begin()) == data;
  }
  EXPECT_TRUE(aliased);
  slices.clear();
  v1::ExecuteResponse extracted;
  ASSERT_TRUE(wire::ParseExtracting(&buffer, &extracted));
  EXPECT_TRUE(MessageDifferencer::Equals(extracted, sent));
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteResponse>(&buffer), sent));
}

TEST(TensorWireTest, SmallResponseIsLeftAlone) {
  v1::ExecuteResponse response;
  (*response.mutable_outputs())["out"] = WireTensor(256, 9);
  const v1::ExecuteResponse sent = response;
  grpc::ByteBuffer buffer = Serialize(response);
  EXPECT_TRUE(MessageDifferencer::Equals(response, sent));
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteResponse>(&buffer), sent));
}

TEST(TensorWireTest, SharedRequestOutlivesItsOwner) {
  auto shared = std::make_shared<const v1::ExecuteRequest>(MakeRequest(2 << 20));
  const v1::ExecuteRequest sent = *shared;
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(wire::SerializeShared(std::move(shared), &buffer).ok());
  EXPECT_EQ(shared, nullptr);  // only the buffer holds the message now
  EXPECT_EQ(buffer.Length(), sent.ByteSizeLong());
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteRequest>(&buffer), sent));
}

TEST(TensorWireTest, TruncatedLargeMessageFails) {
  const std::string wire = MakeRequest(2 << 20).SerializeAsString();
  grpc::Slice slice(wire.data(), wire.size() - 100);
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest got;
  EXPECT_FALSE((grpc::SerializationTraits<v1::ExecuteRequest>::Deserialize(&buffer, &got).ok()));
}

TEST(TensorWireTest, ForgedMarkerFieldParsesAsProtobufWould) {
  // A small tensor that carries the field number the extractor uses as its marker, in a large
  // message: the result must be what protobuf's parser gives (the field stays unknown).
  v1::ExecuteRequest sent = MakeRequest(2 << 20);
  v1::Tensor& small = (*sent.mutable_inputs())["cu_seqlens"];
  small.GetReflection()->MutableUnknownFields(&small)->AddVarint((1 << 29) - 1, 0);
  const std::string wire = sent.SerializeAsString();
  v1::ExecuteRequest expected;
  ASSERT_TRUE(expected.ParseFromString(wire));
  grpc::Slice slice(wire.data(), wire.size());
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest extracted;
  EXPECT_FALSE(wire::ParseExtracting(&buffer, &extracted));  // so the traits fall back
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteRequest>(&buffer), expected));
}

std::string Varint(uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out.push_back(static_cast<char>((value & 0x7f) | 0x80));
  out.push_back(static_cast<char>(value));
  return out;
}

// A length-delimited field: tag, length, payload.
std::string Delimited(int number, const std::string& payload) {
  return Varint((static_cast<uint64_t>(number) << 3) | 2) + Varint(payload.size()) + payload;
}

// An ExecuteRequest.inputs map entry whose value field holds `values` one after the other.
std::string InputEntry(const std::string& name, const std::vector<std::string>& values) {
  std::string entry = Delimited(1, name);
  for (const std::string& value : values) entry += Delimited(2, value);
  return Delimited(v1::ExecuteRequest::kInputsFieldNumber, entry);
}

// Parses `wire` (>= 1 MiB) through the traits and expects exactly what protobuf's own parser
// gives, whether or not the extracting parser takes it.
void ExpectParsesAsProtobuf(const std::string& wire) {
  ASSERT_GE(wire.size(), wire::kLargeMessageBytes);
  v1::ExecuteRequest expected;
  ASSERT_TRUE(expected.ParseFromString(wire));
  grpc::Slice slice(wire.data(), wire.size());
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest extracted;
  if (wire::ParseExtracting(&buffer, &extracted)) {
    EXPECT_TRUE(MessageDifferencer::Equals(extracted, expected));
  }
  EXPECT_TRUE(MessageDifferencer::Equals(Parse<v1::ExecuteRequest>(&buffer), expected));
}

TEST(TensorWireTest, RepeatedDataFieldKeepsTheLastAsProtobufDoes) {
  // One Tensor whose data field comes twice, large then small: protobuf keeps the small one.
  const std::string tensor =
      WireTensor(2 << 20, 5).SerializeAsString() + WireTensor(16, 6).SerializeAsString();
  const std::string wire = InputEntry("x", {tensor});
  v1::ExecuteRequest expected;
  ASSERT_TRUE(expected.ParseFromString(wire));
  ASSERT_EQ(expected.inputs().at("x").data().size(), 16u);
  ExpectParsesAsProtobuf(wire);
}

TEST(TensorWireTest, RepeatedDataFieldSmallThenLargeKeepsTheLarge) {
  const std::string tensor =
      WireTensor(16, 6).SerializeAsString() + WireTensor(2 << 20, 5).SerializeAsString();
  ExpectParsesAsProtobuf(InputEntry("x", {tensor}));
}

TEST(TensorWireTest, RepeatedMapValueFieldsMergeAsProtobufDoes) {
  // The value field of one map entry twice: the two Tensors merge, the later data wins.
  v1::Tensor second;
  second.set_data(WireBytes(24, 7));
  const std::string wire =
      InputEntry("x", {WireTensor(2 << 20, 5).SerializeAsString(), second.SerializeAsString()});
  v1::ExecuteRequest expected;
  ASSERT_TRUE(expected.ParseFromString(wire));
  ASSERT_EQ(expected.inputs().at("x").data().size(), 24u);
  ASSERT_EQ(expected.inputs().at("x").dtype(), v1::DTYPE_F32);  // from the first
  ExpectParsesAsProtobuf(wire);
}

TEST(TensorWireTest, DuplicateMapKeysKeepTheLastEntryAsProtobufDoes) {
  v1::Tensor small;
  small.set_data(WireBytes(8, 3));
  ExpectParsesAsProtobuf(InputEntry("x", {WireTensor(2 << 20, 5).SerializeAsString()}) +
                         InputEntry("x", {small.SerializeAsString()}));
  ExpectParsesAsProtobuf(InputEntry("x", {small.SerializeAsString()}) +
                         InputEntry("x", {WireTensor(2 << 20, 5).SerializeAsString()}));
}

TEST(TensorWireTest, OverlongLengthPrefixFailsAsProtobufDoes) {
  // A Tensor.data length in 6 bytes (protobuf reads at most 5): protobuf refuses the message,
  // so the traits must too.
  std::string tensor = "\x1a";  // field 3, length-delimited
  tensor += std::string("\x80\x80\x80\x80\x80\x00", 6);
  const std::string wire =
      InputEntry("x", {tensor}) + InputEntry("y", {WireTensor(2 << 20, 5).SerializeAsString()});
  v1::ExecuteRequest expected;
  ASSERT_FALSE(expected.ParseFromString(wire));
  grpc::Slice slice(wire.data(), wire.size());
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest got;
  EXPECT_FALSE((grpc::SerializationTraits<v1::ExecuteRequest>::Deserialize(&buffer, &got).ok()));
}

TEST(TensorWireTest, ManySlicesParse) {
  // The message spread over 4 KiB slices, as gRPC's reads deliver it.
  const v1::ExecuteRequest sent = MakeRequest(3 << 20);
  const std::string wire = sent.SerializeAsString();
  std::vector<grpc::Slice> slices;
  for (size_t off = 0; off < wire.size(); off += 4096) {
    slices.emplace_back(wire.data() + off, std::min<size_t>(4096, wire.size() - off));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  v1::ExecuteRequest extracted;
  ASSERT_TRUE(wire::ParseExtracting(&buffer, &extracted));
  EXPECT_TRUE(MessageDifferencer::Equals(extracted, sent));
}

}  // namespace
}  // namespace kernelserve
