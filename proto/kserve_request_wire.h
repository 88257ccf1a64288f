// Sending a KServe v2 ModelInferRequest without copying its raw_input_contents: protobuf writes
// a repeated bytes field by copying it (only singular bytes fields are aliased), so
// wire::SerializeShared would copy every raw entry into gRPC's buffers.
#ifndef KERNELSERVE_PROTO_KSERVE_REQUEST_WIRE_H_
#define KERNELSERVE_PROTO_KSERVE_REQUEST_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <memory>

#include "inference/grpc_service.pb.h"

namespace kernelserve::wire {

// Serializes `request` into `buffer`: every field but the raw entries as protobuf writes it,
// then the raw_input_contents entries in order (protobuf reads a field wherever it comes, so
// any parser reads the same message), each of 16 KiB or more as a slice over the request's own
// string that holds `request` until gRPC lets go. REQUIRES: nothing modifies `request` while
// `buffer`, or a copy gRPC took of it, lives. RESOURCE_EXHAUSTED over 2 GiB.
grpc::Status SerializeInferRequest(std::shared_ptr<const inference::ModelInferRequest> request,
                                   grpc::ByteBuffer* buffer);

}  // namespace kernelserve::wire

#endif  // KERNELSERVE_PROTO_KSERVE_REQUEST_WIRE_H_
