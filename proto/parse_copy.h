// How the extracting parser (proto/tensor_wire.cc) copies large tensor bytes out of gRPC's
// slices: one memcpy per slice by default; a server with a host copier sets a copy that
// splits the pieces over its threads (one thread moves 6-10 GB/s, several 2-4x that).
#ifndef KERNELSERVE_PROTO_PARSE_COPY_H_
#define KERNELSERVE_PROTO_PARSE_COPY_H_

#include "core/scatter_copy.h"

namespace kernelserve::wire {

// Tensor bytes of at least this many bytes go through the copy set below.
inline constexpr size_t kScatterCopyMinBytes = size_t{4} << 20;

// Sets the copy for tensors of kScatterCopyMinBytes or more (nullptr = memcpy each piece).
// Call before serving (not thread-safe with parses in progress).
void SetScatterCopy(ScatterCopy copy);

}  // namespace kernelserve::wire

#endif  // KERNELSERVE_PROTO_PARSE_COPY_H_
