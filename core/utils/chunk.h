// Splitting the sequence axis of a host tensor into fixed-size chunks and back.
//
// Pure functions on host tensors of any dtype; thread-safe.
#ifndef KERNELSERVE_CORE_UTILS_CHUNK_H_
#define KERNELSERVE_CORE_UTILS_CHUNK_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace kernelserve {

// Number of chunks of `chunk_size` that cover `length` (ceil division).
// REQUIRES: length >= 0, chunk_size > 0.
int64_t NumChunks(int64_t length, int64_t chunk_size);

// x [B,S,...] -> [B, ceil(S/c), c, ...]; the positions past S in the last chunk are zero.
// InvalidArgument when x has rank < 2 or chunk_size < 1.
absl::StatusOr<Tensor> Chunk(const Tensor& x, int64_t chunk_size);

// y [B,N,c,...] -> [B,original_s,...], dropping the padding Chunk added. InvalidArgument when
// y has rank < 3 or N != ceil(original_s / c).
absl::StatusOr<Tensor> Unchunk(const Tensor& y, int64_t original_s);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_CHUNK_H_
