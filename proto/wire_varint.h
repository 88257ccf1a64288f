// Writing protobuf varints by hand, for the wire code that builds messages in pieces
// (proto/tensor_wire.cc, proto/response_buffers.cc).
#ifndef KERNELSERVE_PROTO_WIRE_VARINT_H_
#define KERNELSERVE_PROTO_WIRE_VARINT_H_

#include <cstdint>
#include <string>

namespace kernelserve::wire {

// Appends `value` as a base-128 varint.
inline void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace kernelserve::wire

#endif  // KERNELSERVE_PROTO_WIRE_VARINT_H_
