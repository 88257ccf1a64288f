// wire_fuzz: how the server reads request bytes, against protobuf's own parser: the
// extracting parser of proto/tensor_wire.cc, the serialization traits (wire::Deserialize),
// wire::ParseRequest (what every raw handler calls) and wire::DescribeMalformed (the reason it
// gives for bytes that do not parse).
//
// Input: byte 0 picks the message type (mod 10: the kernel calls', then the resident tensors'
// CreateTensorRequest, WriteTensorRequest and ReadTensorResponse, then the KServe v2
// front door's ModelInferRequest), byte 1 how the rest is cut
// into gRPC slices, the rest is the message. Where wire::ParseExtracting succeeds, protobuf's
// ParseFromArray must succeed and give an equal message; wire::Deserialize and wire::ParseRequest
// must always agree with protobuf; DescribeMalformed must name a fault exactly when protobuf
// refuses the bytes. ExecuteRequests and ModelInferRequests are also parsed into buffers of a
// pool (as the server parses for its GPUs), and ExecuteResponses sent with their output bytes
// from buffers; all must read back as protobuf's message. Any disagreement aborts.
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/host_pool.h"
#include "inference/grpc_service.pb.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/parse.h"
#include "proto/tensor_wire.h"
#include "proto/wire_check.h"

namespace kernelserve {
namespace {

// `data` as a ByteBuffer of up to four slices (some possibly empty), cut at points that
// `seed` picks.
grpc::ByteBuffer SlicedBuffer(const uint8_t* data, size_t size, uint8_t seed) {
  std::vector<size_t> cuts = {0, size};
  uint32_t state = seed;
  for (int i = 0; i < (seed & 3); ++i) {
    state = state * 1103515245u + 12345u;
    cuts.push_back((state >> 8) % (size + 1));
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    slices.emplace_back(data + cuts[i], cuts[i + 1] - cuts[i]);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Equal as MessageDifferencer::Equals sees it (unknown fields included), with NaN equal to
// NaN: both parsers copy a float's bits, and NaN != NaN would flag equal messages.
bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

void Fail(const char* what, const google::protobuf::Message& message,
          const std::string& detail = "") {
  std::fprintf(stderr, "wire_fuzz: %s: %s %s\n", what, message.GetDescriptor()->full_name().c_str(),
               detail.c_str());
  std::abort();
}

template <typename Message>
void Check(const uint8_t* data, size_t size, uint8_t seed) {
  Message expected;
  const bool parsed = expected.ParseFromArray(data, static_cast<int>(size));

  Message extracted;
  grpc::ByteBuffer buffer = SlicedBuffer(data, size, seed);
  if (wire::ParseExtracting(&buffer, &extracted)) {
    if (!parsed) Fail("the extracting parser accepts what protobuf refuses", expected);
    if (!SameMessage(extracted, expected)) Fail("the extracting parser differs", expected);
  }

  Message deserialized;
  grpc::ByteBuffer again = SlicedBuffer(data, size, seed);
  const grpc::Status status = wire::Deserialize(&again, &deserialized);
  if (status.ok() != parsed) Fail("Deserialize and protobuf disagree on success", expected);
  if (parsed && !SameMessage(deserialized, expected)) Fail("Deserialize differs", expected);

  Message request;
  grpc::ByteBuffer raw = SlicedBuffer(data, size, seed);
  const absl::Status parse = wire::ParseRequest(&raw, &request);
  if (parse.ok() != parsed) Fail("ParseRequest and protobuf disagree on success", expected);
  if (parsed) {
    if (!SameMessage(request, expected)) Fail("ParseRequest differs", expected);
    const std::string fault =
        wire::DescribeMalformed(SlicedBuffer(data, size, seed), Message::descriptor());
    if (!fault.empty()) Fail("a fault is named in bytes protobuf takes", expected, fault);
  } else {
    // ParseRequest's error holds DescribeMalformed's fault, or this when it found none.
    if (parse.code() != absl::StatusCode::kInvalidArgument ||
        absl::EndsWith(parse.message(), "the protobuf parser refused them")) {
      Fail("no fault named for bytes protobuf refuses", expected, parse.ToString());
    }
  }
}

// A pool that gives a buffer for any tensor of a byte or more (64 MiB at most, then strings).
HostBufferPool& FuzzPool() {
  static HostBufferPool* pool = [] {
    HostPoolOptions options;
    options.limit_bytes = size_t{64} << 20;
    options.min_bytes = 1;
    options.allocate = [](size_t n) { return std::malloc(n); };
    options.free = [](void* p) { std::free(p); };
    return new HostBufferPool(std::move(options));
  }();
  return *pool;
}

// The extracting parse into buffers: with each buffer's bytes put back, the message is
// protobuf's; TakeTensors then reads the same bytes.
void CheckBufferMode(const uint8_t* data, size_t size, uint8_t seed) {
  v1::ExecuteRequest expected;
  const bool parsed = expected.ParseFromArray(data, static_cast<int>(size));
  v1::ExecuteRequest got;
  wire::TensorBuffers buffers;
  grpc::ByteBuffer buffer = SlicedBuffer(data, size, seed);
  if (!wire::ParseExtracting(&buffer, &got, &FuzzPool(), &buffers)) {
    if (!buffers.empty()) Fail("a failed parse left buffers", expected);
    return;
  }
  if (!parsed) Fail("the buffer-mode parser accepts what protobuf refuses", expected);
  for (auto& [name, tensor] : *got.mutable_inputs()) {
    auto found = buffers.find(&tensor);
    if (found == buffers.end()) continue;
    if (!tensor.data().empty()) Fail("a tensor has bytes in a buffer and in the message", got);
    tensor.set_data(static_cast<const char*>(found->second->data()), found->second->size());
  }
  if (!SameMessage(got, expected)) Fail("the buffer-mode parser differs", expected);
}

// The same for a ModelInferRequest: each raw_input_contents entry in a buffer is empty in the
// message, and with the bytes put back the message is protobuf's.
void CheckInferBufferMode(const uint8_t* data, size_t size, uint8_t seed) {
  inference::ModelInferRequest expected;
  const bool parsed = expected.ParseFromArray(data, static_cast<int>(size));
  inference::ModelInferRequest got;
  wire::RawBuffers buffers;
  grpc::ByteBuffer buffer = SlicedBuffer(data, size, seed);
  if (!wire::ParseExtracting(&buffer, &got, &FuzzPool(), &buffers)) {
    if (!buffers.empty()) Fail("a failed parse left buffers", expected);
    return;
  }
  if (!parsed) Fail("the buffer-mode parser accepts what protobuf refuses", expected);
  if (!buffers.empty() && buffers.size() != static_cast<size_t>(got.raw_input_contents_size())) {
    Fail("raw buffers and entries differ in number", got);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) continue;
    std::string* raw = got.mutable_raw_input_contents(static_cast<int>(i));
    if (!raw->empty()) Fail("an entry has bytes in a buffer and in the message", got);
    raw->assign(static_cast<const char*>(buffers[i]->data()), buffers[i]->size());
  }
  if (!SameMessage(got, expected)) Fail("the buffer-mode parser differs", expected);
}

// An ExecuteResponse sent with its output bytes in buffers parses to the same message.
void CheckSendFromBuffers(const uint8_t* data, size_t size) {
  v1::ExecuteResponse expected;
  if (!expected.ParseFromArray(data, static_cast<int>(size))) return;
  v1::ExecuteResponse response = expected;
  wire::TensorBuffers buffers;
  for (auto& [name, tensor] : *response.mutable_outputs()) {
    std::shared_ptr<HostBuffer> held = FuzzPool().TryAllocate(tensor.data().size());
    if (held == nullptr) continue;  // empty, or the pool is full: sent from the message
    std::memcpy(held->data(), tensor.data().data(), tensor.data().size());
    tensor.clear_data();
    buffers[&tensor] = std::move(held);
  }
  grpc::ByteBuffer sent;
  if (!wire::SerializeResponse(response, buffers, &sent).ok()) {
    Fail("SerializeResponse failed", expected);
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (sent.Valid() && !sent.Dump(&slices).ok()) Fail("Dump failed", expected);
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  v1::ExecuteResponse got;
  if (!got.ParseFromString(bytes)) Fail("a response sent from buffers does not parse", expected);
  if (!SameMessage(got, expected)) Fail("a response sent from buffers differs", expected);
}

}  // namespace
}  // namespace kernelserve

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  kernelserve::wire::FilterParseLogs();  // as the server does: no log line per refused message
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = kernelserve::v1;
  if (size < 2) return 0;
  const uint8_t seed = data[1];
  const uint8_t* message = data + 2;
  const size_t bytes = size - 2;
  switch (data[0] % 10) {
    case 0:
      kernelserve::Check<v1::ExecuteRequest>(message, bytes, seed);
      kernelserve::CheckBufferMode(message, bytes, seed);
      break;
    case 1:
      kernelserve::Check<v1::ExecuteResponse>(message, bytes, seed);
      kernelserve::CheckSendFromBuffers(message, bytes);
      break;
    case 2:
      kernelserve::Check<v1::ExecuteBatchRequest>(message, bytes, seed);
      break;
    case 3:
      kernelserve::Check<v1::ExecuteBatchResponse>(message, bytes, seed);
      break;
    case 4:
      kernelserve::Check<v1::AutotuneRequest>(message, bytes, seed);
      break;
    case 5:
      kernelserve::Check<v1::PutConfigRequest>(message, bytes, seed);
      break;
    case 6:
      kernelserve::Check<v1::CreateTensorRequest>(message, bytes, seed);
      break;
    case 7:
      kernelserve::Check<v1::WriteTensorRequest>(message, bytes, seed);
      break;
    case 8:
      kernelserve::Check<v1::ReadTensorResponse>(message, bytes, seed);
      break;
    case 9:
      kernelserve::Check<inference::ModelInferRequest>(message, bytes, seed);
      kernelserve::CheckInferBufferMode(message, bytes, seed);
      break;
  }
  return 0;
}
