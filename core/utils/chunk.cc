#include "core/utils/chunk.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace {

// Bytes of one sequence position: the product of the dims after `first_inner` times the item.
size_t RowBytes(const Tensor& t, int first_inner) {
  size_t bytes = ItemSize(t.dtype());
  for (int d = first_inner; d < t.rank(); ++d) bytes *= static_cast<size_t>(t.dim(d));
  return bytes;
}

}  // namespace

int64_t NumChunks(int64_t length, int64_t chunk_size) {
  return (length + chunk_size - 1) / chunk_size;
}

absl::StatusOr<Tensor> Chunk(const Tensor& x, int64_t chunk_size) {
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: expected rank >= 2 [B,S,...], got ", ShapeString(x.shape())));
  }
  if (chunk_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_size: expected >= 1, got ", chunk_size));
  }
  const int64_t batch = x.dim(0);
  const int64_t seq = x.dim(1);
  const int64_t chunks = NumChunks(seq, chunk_size);
  Shape shape = {batch, chunks, chunk_size};
  shape.insert(shape.end(), x.shape().begin() + 2, x.shape().end());
  Tensor y = Tensor::Zeros(x.dtype(), shape);
  const size_t row = RowBytes(x, 2);
  const char* src = static_cast<const char*>(x.data());
  char* dst = static_cast<char*>(y.data());
  const size_t src_batch = static_cast<size_t>(seq) * row;
  const size_t dst_batch = static_cast<size_t>(chunks * chunk_size) * row;
  for (int64_t b = 0; b < batch; ++b) {
    if (src_batch > 0) std::memcpy(dst + b * dst_batch, src + b * src_batch, src_batch);
  }
  return y;
}

absl::StatusOr<Tensor> Unchunk(const Tensor& y, int64_t original_s) {
  if (y.rank() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("y: expected rank >= 3 [B,N,c,...], got ", ShapeString(y.shape())));
  }
  const int64_t batch = y.dim(0);
  const int64_t chunks = y.dim(1);
  const int64_t chunk_size = y.dim(2);
  if (original_s < 0 || chunk_size < 1 || NumChunks(original_s, chunk_size) != chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("y ", ShapeString(y.shape()), ": expected ceil(original_s / ", chunk_size,
                     ") chunks for original_s ", original_s, ", got ", chunks));
  }
  Shape shape = {batch, original_s};
  shape.insert(shape.end(), y.shape().begin() + 3, y.shape().end());
  Tensor x = Tensor::Empty(y.dtype(), shape);
  const size_t row = RowBytes(y, 3);
  const char* src = static_cast<const char*>(y.data());
  char* dst = static_cast<char*>(x.data());
  const size_t src_batch = static_cast<size_t>(chunks * chunk_size) * row;
  const size_t dst_batch = static_cast<size_t>(original_s) * row;
  for (int64_t b = 0; b < batch; ++b) {
    if (dst_batch > 0) std::memcpy(dst + b * dst_batch, src + b * src_batch, dst_batch);
  }
  return x;
}

}  // namespace kernelserve
