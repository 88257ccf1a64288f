// gRPC (de)serialization of the messages that carry tensor bytes (ExecuteRequest,
// ExecuteResponse, their batch forms, AutotuneRequest, PutConfigRequest, and the resident
// tensors' CreateTensorRequest, WriteTensorRequest and ReadTensorResponse), and the parse of
// the KServe v2 front door's ModelInferRequest (whose raw_input_contents take the same path).
//
// Protobuf's parser reads a bytes field that spans many gRPC slices by appending slice after
// slice to a string reserved for at most 50 MB, so a 256 MiB tensor is copied 2.4 times over
// (50 -> 100 -> 200 -> 400 MB growth) into ~600 MB of freshly faulted pages. For a message of
// kLargeMessageBytes or more, Deserialize here instead walks the wire format once, copies
// each Tensor.data straight from the slices into a string of the exact size (huge-page backed
// when the kernel allows), and lets protobuf parse only the small remainder, in which a marker
// field stands for each data field in wire order; the result is exactly what protobuf's own
// parse gives (a repeated data field keeps the last, a map value given twice merges, a
// repeated map key keeps the last entry). Smaller messages take gRPC's usual path. A
// ModelInferRequest's raw_input_contents entries are taken out the same way, each entry's
// marker in the request's own unknown fields, and put back in wire order.
//
// Sending: gRPC copies a message into 1 MiB slices before it writes any of it. SerializeShared
// instead points slices at the large Tensor.data bytes of a shared, immutable message (kept
// alive until gRPC lets go of them). The server's responses take that path through the
// traits below: for a response of kLargeMessageBytes or more, Serialize moves the contents out
// of the response object (O(1), Swap) into such a shared message, so after Finish/StartWrite
// the response object is left empty. Requests serialized through the traits are copied, as the
// caller may reuse them; Client sends its own requests with SerializeShared.
//
// C++ requires an explicit specialization to be declared before any use that would instantiate
// the primary template, in every translation unit that uses it. So a translation unit that
// serializes or parses these messages through gRPC includes this header (or a header that
// does: proto/parse.h, proto/convert.h) before it makes gRPC do so, and reaches the generated
// service through proto/kernel_service_grpc.h, which includes this header before protoc's
// kernel_service.grpc.pb.h; the generated kernel_service.grpc.pb.cc is compiled the same way
// (proto/kernel_service_grpc.cc).
#ifndef KERNELSERVE_PROTO_TENSOR_WIRE_H_
#define KERNELSERVE_PROTO_TENSOR_WIRE_H_

// protoc's include guard of kernel_service.grpc.pb.h: its templates may already have used the
// generic traits of these messages.
#ifdef GRPC_kernelserve_2fv1_2fkernel_5fservice_2eproto__INCLUDED
#error \
    "kernel_service.grpc.pb.h came before proto/tensor_wire.h: include proto/kernel_service_grpc.h"
#endif

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/host_buffer.h"
#include "inference/grpc_service.pb.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::wire {

// Messages of at least this many bytes take the extracting parser.
inline constexpr size_t kLargeMessageBytes = size_t{1} << 20;

// Parses `buffer` into `message` and clears the buffer, as grpc::GenericDeserialize does.
// INTERNAL for malformed data.
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteResponse* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteBatchRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteBatchResponse* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::AutotuneRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::PutConfigRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ReadTensorResponse* message);

// Tensor bytes kept outside a message, by the Tensor they belong to: that Tensor's data field
// is empty and the buffer holds its bytes. The keys point into the message, so they hold only
// while the message's tensor maps are not changed.
using TensorBuffers = absl::flat_hash_map<const v1::Tensor*, std::shared_ptr<HostBuffer>>;

// Deserialize, where each Tensor.data of a large message that `allocator` gives a buffer for
// (see HostAllocator::TryAllocate) is copied from the slices into that buffer, not into the
// message, and listed in `buffers` (cleared first). With the pinned pool of the CUDA platform
// as the allocator, the bytes land where a GPU reads them by DMA.
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers);
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers);
// The extracting parse with an allocator, whatever the size (for tests and wire_fuzz).
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message,
                     HostAllocator* allocator, TensorBuffers* buffers);

// The raw_input_contents of a ModelInferRequest kept outside the message, by entry: where
// entry i is non-null, raw_input_contents(i) is empty and the buffer holds its bytes. Either
// empty or of raw_input_contents_size() entries.
using RawBuffers = std::vector<std::shared_ptr<HostBuffer>>;

// The KServe v2 request, parsed as protobuf does (INTERNAL for malformed data); a large one by
// the extracting parse, each raw_input_contents entry copied from the slices once: into a
// buffer from `allocator` (nullable) where it gives one, listed in `buffers` (cleared first;
// nullable without an allocator), else into a string of the exact size.
grpc::Status Deserialize(grpc::ByteBuffer* buffer, inference::ModelInferRequest* message,
                         HostAllocator* allocator = nullptr, RawBuffers* buffers = nullptr);
// The extracting parse of a ModelInferRequest, whatever the size (for tests and wire_fuzz).
bool ParseExtracting(grpc::ByteBuffer* buffer, inference::ModelInferRequest* message,
                     HostAllocator* allocator = nullptr, RawBuffers* buffers = nullptr);

// A slice over the bytes of `buffer` that holds it until gRPC lets go (no copy).
grpc::Slice BufferSlice(std::shared_ptr<HostBuffer> buffer);

// The extracting parse alone, whatever the size: false where it leaves the message to
// protobuf (malformed data, a field with the marker's number, a map key given twice), and the
// traits then parse as gRPC does. When true, `message` equals what protobuf's ParseFromString
// gives for the same bytes. For tests and the wire_fuzz harness.
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteResponse* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteBatchRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteBatchResponse* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::AutotuneRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::PutConfigRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message);
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ReadTensorResponse* message);

// Serializes `message` into `buffer`. In a message of kLargeMessageBytes or more, the large
// bytes and string fields (those protobuf hands to WriteAliasedRaw: any that does not fit the
// current 16 KiB block) are not copied: their slices point into `message`, which the slices
// keep alive. REQUIRES: nothing modifies `message` while `buffer`, or a copy gRPC took of it,
// lives.
grpc::Status SerializeShared(std::shared_ptr<const google::protobuf::MessageLite> message,
                             grpc::ByteBuffer* buffer);

// The traits' Serialize of a response: a small one as gRPC does, a large one by moving its
// contents into a shared message for SerializeShared (leaving `message` empty).
grpc::Status SerializeResponse(v1::ExecuteResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer);
grpc::Status SerializeResponse(v1::ExecuteBatchResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer);
grpc::Status SerializeResponse(v1::ReadTensorResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer);

// Serializes `message` with the bytes of each output listed in `buffers` (whose data field is
// empty) sent from its buffer without a copy: a slice points at it and holds the buffer until
// gRPC lets go. Those outputs follow the rest of the message on the wire (protobuf merges map
// entries wherever they come), so any protobuf parser reads the same message as if the bytes
// were in it. Leaves `buffers` empty, and `message` as the overload above does.
grpc::Status SerializeResponse(v1::ExecuteResponse& message, TensorBuffers& buffers,
                               grpc::ByteBuffer* buffer);

}  // namespace kernelserve::wire

// Requests: serialized as gRPC does (copied), parsed by wire::Deserialize.
#define KERNELSERVE_WIRE_TRAITS(Message)                                                           \
  template <>                                                                                      \
  class SerializationTraits<::kernelserve::v1::Message, void> {                                    \
   public:                                                                                         \
    static Status Serialize(const ::grpc::protobuf::MessageLite& msg, ByteBuffer* bb,              \
                            bool* own_buffer) {                                                    \
      return GenericSerialize<ProtoBufferWriter, ::kernelserve::v1::Message>(msg, bb, own_buffer); \
    }                                                                                              \
    static Status Deserialize(ByteBuffer* buffer, ::kernelserve::v1::Message* msg) {               \
      return ::kernelserve::wire::Deserialize(buffer, msg);                                        \
    }                                                                                              \
  };

// Responses: serialized by wire::SerializeResponse (large ones without copying the tensor
// bytes, emptying the response), parsed by wire::Deserialize.
#define KERNELSERVE_WIRE_RESPONSE_TRAITS(Message)                                        \
  template <>                                                                            \
  class SerializationTraits<::kernelserve::v1::Message, void> {                          \
   public:                                                                               \
    static Status Serialize(const ::grpc::protobuf::MessageLite& msg, ByteBuffer* bb,    \
                            bool* own_buffer) {                                          \
      /* The server owns its (non-const) response objects and never reads them again. */ \
      return ::kernelserve::wire::SerializeResponse(                                     \
          const_cast<::kernelserve::v1::Message&>(                                       \
              static_cast<const ::kernelserve::v1::Message&>(msg)),                      \
          bb, own_buffer);                                                               \
    }                                                                                    \
    static Status Deserialize(ByteBuffer* buffer, ::kernelserve::v1::Message* msg) {     \
      return ::kernelserve::wire::Deserialize(buffer, msg);                              \
    }                                                                                    \
  };

namespace grpc {
KERNELSERVE_WIRE_TRAITS(ExecuteRequest)
KERNELSERVE_WIRE_RESPONSE_TRAITS(ExecuteResponse)
KERNELSERVE_WIRE_TRAITS(ExecuteBatchRequest)
KERNELSERVE_WIRE_RESPONSE_TRAITS(ExecuteBatchResponse)
KERNELSERVE_WIRE_TRAITS(AutotuneRequest)
KERNELSERVE_WIRE_TRAITS(PutConfigRequest)
KERNELSERVE_WIRE_TRAITS(CreateTensorRequest)
KERNELSERVE_WIRE_TRAITS(WriteTensorRequest)
KERNELSERVE_WIRE_RESPONSE_TRAITS(ReadTensorResponse)
}  // namespace grpc

#undef KERNELSERVE_WIRE_TRAITS
#undef KERNELSERVE_WIRE_RESPONSE_TRAITS

#endif  // KERNELSERVE_PROTO_TENSOR_WIRE_H_
