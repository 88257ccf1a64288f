// Parsing a request from the bytes gRPC received, for handlers registered as raw methods: bytes
// that do not parse get an INVALID_ARGUMENT that names the message and the first fault, rather
// than gRPC's bare UNIMPLEMENTED for a callback method whose deserialization failed.
#ifndef KERNELSERVE_PROTO_PARSE_H_
#define KERNELSERVE_PROTO_PARSE_H_

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/tensor_wire.h"

namespace kernelserve::wire {

// Keeps protobuf from logging each request that fails to parse (its reason goes back to the
// client in the INVALID_ARGUMENT instead, so a client cannot flood the server's log); other
// protobuf messages still go to the log (core/utils/log.h). Call once, before serving (not
// thread-safe).
void FilterParseLogs();

// The INVALID_ARGUMENT for `buffer` failing to parse as `type` (buffer left unchanged).
absl::Status MalformedRequest(const grpc::ByteBuffer& buffer,
                              const google::protobuf::Descriptor* type);

// Parses `buffer` into `message` as the message's serialization traits do (the extracting
// parser for messages that carry tensors) and then clears `buffer`, so the received bytes are
// freed before the call runs. An empty buffer is the empty message. InvalidArgument (see
// MalformedRequest) when the bytes do not parse.
template <typename Message, typename Deserializer>
absl::Status ParseRequestWith(grpc::ByteBuffer* buffer, Message* message,
                              Deserializer deserialize) {
  if (!buffer->Valid() || buffer->Length() == 0) {
    message->Clear();
    buffer->Clear();
    return absl::OkStatus();
  }
  grpc::ByteBuffer view(*buffer);  // shares the slices; Deserialize consumes the view
  const grpc::Status parsed = deserialize(&view, message);
  absl::Status status =
      parsed.ok() ? absl::OkStatus() : MalformedRequest(*buffer, Message::descriptor());
  buffer->Clear();
  return status;
}

template <typename Message>
absl::Status ParseRequest(grpc::ByteBuffer* buffer, Message* message) {
  return ParseRequestWith(buffer, message, [](grpc::ByteBuffer* view, Message* m) {
    return grpc::SerializationTraits<Message>::Deserialize(view, m);
  });
}

// ParseRequest, with large tensor bytes in buffers from `allocator` (nullable), listed in
// `buffers` (see wire::Deserialize). On an error `buffers` is empty.
// Message: v1::ExecuteRequest, v1::CreateTensorRequest or v1::WriteTensorRequest (Buffers:
// TensorBuffers), or inference::ModelInferRequest (Buffers: RawBuffers).
template <typename Message, typename Buffers>
absl::Status ParseRequest(grpc::ByteBuffer* buffer, Message* message, HostAllocator* allocator,
                          Buffers* buffers) {
  buffers->clear();
  absl::Status status =
      ParseRequestWith(buffer, message, [allocator, buffers](grpc::ByteBuffer* view, Message* m) {
        return Deserialize(view, m, allocator, buffers);
      });
  if (!status.ok()) buffers->clear();
  return status;
}

}  // namespace kernelserve::wire

#endif  // KERNELSERVE_PROTO_PARSE_H_
