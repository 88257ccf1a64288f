// Why bytes do not parse as a protobuf message: the first fault in the wire format, found by
// walking it with the message's descriptor, for errors a client can act on.
#ifndef KERNELSERVE_PROTO_WIRE_CHECK_H_
#define KERNELSERVE_PROTO_WIRE_CHECK_H_

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "google/protobuf/descriptor.h"

namespace kernelserve::wire {

// The first fault that makes `buffer` fail to parse as a `type` message, as protobuf's parser
// sees it, e.g. "field 2 (inputs) at byte 14: length 300 runs past the end of its message (12
// bytes left)", "field 1 (kernel) at byte 0: not valid UTF-8", "truncated varint at byte 9".
// "" when the walk finds no fault. Does not modify `buffer`.
std::string DescribeMalformed(const grpc::ByteBuffer& buffer,
                              const google::protobuf::Descriptor* type);

}  // namespace kernelserve::wire

#endif  // KERNELSERVE_PROTO_WIRE_CHECK_H_
