// Tensor bytes kept outside the messages: parsed into buffers from a HostAllocator
// (wire::Deserialize with an allocator), taken into Tensors without a copy, and sent from the
// buffers (wire::SerializeResponse). What a protobuf parser reads must not change.
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/host_pool.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/parse.h"
#include "proto/parse_copy.h"
#include "proto/tensor_wire.h"
#include "tests/proto/wire_test_data.h"

namespace kernelserve {
namespace {

using google::protobuf::util::MessageDifferencer;

constexpr size_t kMiB = size_t{1} << 20;

using ::kernelserve::testing::WireBytes;
using ::kernelserve::testing::WireTensor;

// A pool over malloc (standing in for page-locked memory), 1 MiB minimum.
HostPoolOptions HeapPool(size_t limit) {
  HostPoolOptions o;
  o.limit_bytes = limit;
  o.allocate = [](size_t n) { return std::malloc(n); };
  o.free = [](void* p) { std::free(p); };
  return o;
}

grpc::ByteBuffer Serialize(const v1::ExecuteRequest& m) {
  grpc::ByteBuffer buffer;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<v1::ExecuteRequest>::Serialize(m, &buffer, &own).ok());
  return buffer;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

v1::ExecuteRequest MakeRequest() {
  v1::ExecuteRequest r;
  r.set_kernel("flash_attention");
  (*r.mutable_inputs())["q"] = WireTensor(3 * kMiB, 1);
  (*r.mutable_inputs())["k"] = WireTensor(2 * kMiB + 12, 2);
  (*r.mutable_inputs())["small"] = WireTensor(4096, 3);
  r.set_request_id("req-9");
  return r;
}

TEST(TensorBuffersTest, LargeTensorsAreParsedIntoBuffersAndTakenWithoutACopy) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  const v1::ExecuteRequest sent = MakeRequest();
  grpc::ByteBuffer buffer = Serialize(sent);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_TRUE(got.inputs().at("q").data().empty());
  EXPECT_EQ(got.inputs().at("small").data(), sent.inputs().at("small").data());
  EXPECT_EQ(got.request_id(), "req-9");
  const void* q_bytes = buffers.at(&got.inputs().at("q"))->data();

  absl::StatusOr<TensorMap> tensors = TakeTensors(got.mutable_inputs(), &buffers);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  for (const char* name : {"q", "k", "small"}) {
    EXPECT_EQ(tensors->at(name).bytes(), sent.inputs().at(name).data()) << name;
  }
  EXPECT_EQ(tensors->at("q").data(), q_bytes) << "the tensor holds the parsed buffer";
  EXPECT_NE(tensors->at("q").buffer(), nullptr);
  EXPECT_EQ(tensors->at("small").buffer(), nullptr);
  EXPECT_EQ(pool.stats().in_use_bytes, 4 * kMiB + 4 * kMiB);  // 3 -> 4 MiB, 2 MiB+12 -> 4 MiB
  tensors->clear();
  buffers.clear();
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

TEST(TensorBuffersTest, LargeTensorsGoThroughTheScatterCopy) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  v1::ExecuteRequest sent = MakeRequest();
  (*sent.mutable_inputs())["big"] = WireTensor(9 * kMiB + 4, 4);
  std::vector<size_t> calls;  // bytes per call
  wire::SetScatterCopy([&calls](const std::vector<CopyPiece>& pieces) {
    size_t bytes = 0;
    for (const CopyPiece& p : pieces) {
      std::memcpy(p.dst, p.src, p.bytes);
      bytes += p.bytes;
    }
    calls.push_back(bytes);
  });
  grpc::ByteBuffer buffer = Serialize(sent);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  const absl::Status status = wire::ParseRequest(&buffer, &got, &pool, &buffers);
  wire::SetScatterCopy(nullptr);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(calls, std::vector<size_t>{9 * kMiB + 4}) << "only tensors of 4 MiB or more";
  absl::StatusOr<TensorMap> tensors = TakeTensors(got.mutable_inputs(), &buffers);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->at("big").bytes(), sent.inputs().at("big").data());
  EXPECT_EQ(tensors->at("q").bytes(), sent.inputs().at("q").data());
}

TEST(TensorBuffersTest, WithoutRoomInThePoolTheBytesStayInTheMessage) {
  HostBufferPool pool(HeapPool(0));
  const v1::ExecuteRequest sent = MakeRequest();
  grpc::ByteBuffer buffer = Serialize(sent);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  EXPECT_TRUE(buffers.empty());
  EXPECT_TRUE(MessageDifferencer::Equals(got, sent));
}

TEST(TensorBuffersTest, ARepeatedDataFieldKeepsTheLastInBufferMode) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  v1::ExecuteRequest first;
  first.set_kernel("k");
  (*first.mutable_inputs())["x"] = WireTensor(2 * kMiB, 5);
  v1::ExecuteRequest second;
  (*second.mutable_inputs())["x"] = WireTensor(2 * kMiB, 6);
  // Two entries of one key: protobuf keeps the last entry.
  const std::string wire = first.SerializeAsString() + second.SerializeAsString();
  grpc::Slice slice(wire);
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  absl::StatusOr<TensorMap> tensors = TakeTensors(got.mutable_inputs(), &buffers);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->at("x").bytes(), second.inputs().at("x").data());
}

TEST(TensorBuffersTest, BytesThatDoNotParseLeaveNoBuffers) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  std::string wire = Flatten(Serialize(MakeRequest()));
  wire.resize(wire.size() - 100);  // cut inside the last tensor
  grpc::Slice slice(wire);
  grpc::ByteBuffer buffer(&slice, 1);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  absl::Status status = wire::ParseRequest(&buffer, &got, &pool, &buffers);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(buffers.empty());
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

TEST(TensorBuffersTest, ABufferOfTheWrongSizeForTheShapeIsInvalidArgument) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  v1::ExecuteRequest sent = MakeRequest();
  (*sent.mutable_inputs())["q"].add_shape(2);  // shape now needs twice the bytes
  grpc::ByteBuffer buffer = Serialize(sent);
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  ASSERT_TRUE(wire::ParseRequest(&buffer, &got, &pool, &buffers).ok());
  absl::StatusOr<TensorMap> tensors = TakeTensors(got.mutable_inputs(), &buffers);
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.status().message().find("input 'q'"), std::string::npos) << tensors.status();
  EXPECT_NE(tensors.status().message().find("got 3145728"), std::string::npos) << tensors.status();
}

// The response a client must read: outputs with their bytes, and the other fields.
v1::ExecuteResponse ExpectedResponse(const std::string& out_bytes) {
  v1::ExecuteResponse r;
  v1::Tensor& out = (*r.mutable_outputs())["out"];
  out.set_dtype(v1::DTYPE_BF16);
  out.add_shape(static_cast<int64_t>(out_bytes.size() / 2));
  out.set_data(out_bytes);
  (*r.mutable_outputs())["lse"] = WireTensor(64, 9);
  r.set_platform("cuda");
  r.set_device(1);
  r.mutable_timing()->set_kernel_us(77);
  r.set_request_id("abc");
  return r;
}

TEST(TensorBuffersTest, ResponsesAreSentFromTheBuffersAndParseAsTheFullMessage) {
  for (size_t out_size : {size_t{2} * kMiB, size_t{3} * kMiB + 6}) {
    HostBufferPool pool(HeapPool(64 * kMiB));
    const std::string out_bytes = WireBytes(out_size, 11);
    std::shared_ptr<HostBuffer> held = pool.TryAllocate(out_bytes.size());
    ASSERT_NE(held, nullptr);
    std::memcpy(held->data(), out_bytes.data(), out_bytes.size());
    Tensor out = *Tensor::FromBuffer(DType::kBF16, {static_cast<int64_t>(out_size / 2)}, held);
    const void* where = held->data();
    held.reset();

    v1::ExecuteResponse response = ExpectedResponse(out_bytes);
    wire::TensorBuffers buffers;
    PutTensor(std::move(out), &(*response.mutable_outputs())["out"], &buffers);
    ASSERT_EQ(buffers.size(), 1u);
    EXPECT_TRUE(response.outputs().at("out").data().empty());

    grpc::ByteBuffer sent;
    ASSERT_TRUE(wire::SerializeResponse(response, buffers, &sent).ok());
    EXPECT_TRUE(buffers.empty());
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(sent.Dump(&slices).ok());
    bool aliased = false;
    for (const grpc::Slice& s : slices) aliased |= s.begin() == where;
    EXPECT_TRUE(aliased) << "the output bytes are sent from the buffer, not copied";

    v1::ExecuteResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(sent)));
    EXPECT_TRUE(MessageDifferencer::Equals(parsed, ExpectedResponse(out_bytes)))
        << parsed.ShortDebugString().substr(0, 300);
    slices.clear();
    EXPECT_GT(pool.stats().in_use_bytes, 0u) << "gRPC still holds the bytes";
    sent.Clear();
    EXPECT_EQ(pool.stats().in_use_bytes, 0u) << "released with the last slice";
  }
}

TEST(TensorBuffersTest, PutTensorWithoutABufferCopiesIntoTheMessage) {
  v1::Tensor proto;
  wire::TensorBuffers buffers;
  PutTensor(Tensor::FromFloats(DType::kF32, {2}, {1.0f, 2.0f}), &proto, &buffers);
  EXPECT_TRUE(buffers.empty());
  EXPECT_EQ(proto.data().size(), 8u);
}

TEST(TensorBuffersTest, ResidentContentsAreParsedIntoABufferAndReadBackAsSent) {
  HostBufferPool pool(HeapPool(64 * kMiB));
  v1::CreateTensorRequest create;
  create.set_name("k");
  create.set_dtype(v1::DTYPE_F16);
  create.add_shape(3 * kMiB / 2);
  *create.mutable_contents() = WireTensor(3 * kMiB, 4);
  grpc::Slice bytes(create.SerializeAsString());
  grpc::ByteBuffer buffer(&bytes, 1);
  v1::CreateTensorRequest got;
  wire::TensorBuffers buffers;
  ASSERT_TRUE(wire::Deserialize(&buffer, &got, &pool, &buffers).ok());
  ASSERT_EQ(buffers.size(), 1u);
  ASSERT_TRUE(buffers.contains(&got.contents()));
  EXPECT_TRUE(got.contents().data().empty());
  const std::shared_ptr<HostBuffer>& held = buffers.at(&got.contents());
  got.mutable_contents()->set_data(static_cast<const char*>(held->data()), held->size());
  EXPECT_TRUE(MessageDifferencer::Equals(got, create));

  v1::WriteTensorRequest write;
  write.set_name("k");
  write.set_byte_offset(2);
  *write.mutable_contents() = WireTensor(2 * kMiB, 5);
  grpc::Slice write_bytes(write.SerializeAsString());
  grpc::ByteBuffer write_buffer(&write_bytes, 1);
  v1::WriteTensorRequest write_got;
  ASSERT_TRUE(wire::Deserialize(&write_buffer, &write_got, &pool, &buffers).ok());
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(std::string(static_cast<const char*>(buffers.begin()->second->data()),
                        buffers.begin()->second->size()),
            write.contents().data());
}

}  // namespace
}  // namespace kernelserve
