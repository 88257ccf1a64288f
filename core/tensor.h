// Host tensors: dense, row-major, little-endian buffers with a dtype and a shape.
#ifndef KERNELSERVE_CORE_TENSOR_H_
#define KERNELSERVE_CORE_TENSOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_buffer.h"

namespace kernelserve {

using Shape = std::vector<int64_t>;

// The most dims a tensor may have (numpy's own limit); the wire conversion refuses more.
inline constexpr size_t kMaxRank = 64;
// Shapes of more dims than this are named by their rank alone in messages.
inline constexpr size_t kMaxShapeStringDims = 16;

// "[2,3,4]"; "a shape of 100000 dims" past kMaxShapeStringDims, so that error messages stay
// short whatever a client sends.
std::string ShapeString(const Shape& shape);
// Product of the dims; InvalidArgument if a dim is negative or the product overflows int64.
absl::StatusOr<int64_t> NumElements(const Shape& shape);

// What an invocation knows of an input: dtype and shape, no data.
struct TensorSpec {
  DType dtype = DType::kF32;
  Shape shape;

  bool operator==(const TensorSpec& other) const = default;
  // "bf16[2,3,4]".
  std::string DebugString() const;
};

// A host tensor that owns its bytes.
//
// The bytes live in a std::string, so that a protobuf `bytes` field can be moved in and out
// without a copy, or in a HostBuffer (page-locked memory from a pool, which a GPU reads by
// DMA) that the tensor holds. Either way a Tensor is a value: a copy copies the bytes (into a
// string), a move moves them; except a view (HostBuffer::view(), bytes in a shared-memory
// region), whose copies view the same bytes. The buffer's start is aligned as malloc aligns
// (16 bytes on x86-64) or better.
// Thread safety: a const Tensor may be read from many threads; mutation needs outside sync.
class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept = default;
  Tensor& operator=(Tensor&& other) noexcept = default;

  // An uninitialised tensor of `shape`. REQUIRES: dims >= 0 and no overflow of the byte count.
  static Tensor Empty(DType dtype, Shape shape);
  // Like Empty, then every byte set to zero.
  static Tensor Zeros(DType dtype, Shape shape);
  // Takes ownership of `bytes`; InvalidArgument if a dim is negative, the element count
  // overflows, or bytes.size() != prod(shape) * ItemSize(dtype) (the message names both sizes).
  static absl::StatusOr<Tensor> FromBytes(DType dtype, Shape shape, std::string bytes);
  // Holds `buffer` (non-null) as the tensor's bytes; InvalidArgument as FromBytes when its size
  // does not match.
  static absl::StatusOr<Tensor> FromBuffer(DType dtype, Shape shape,
                                           std::shared_ptr<HostBuffer> buffer);
  // A tensor of `dtype` and `shape` without bytes (nbytes() == 0, has_data() false): an input
  // of which a kernel reads only the spec (InputSchema::shape_only).
  // REQUIRES: dims >= 0 and no overflow of the byte count.
  static Tensor ShapeOnly(DType dtype, Shape shape);
  // Copies `values` (as f32, i32 or i64 elements) into a new tensor of `shape`.
  // REQUIRES: values.size() == prod(shape).
  static Tensor FromFloats(DType dtype, Shape shape, const std::vector<float>& values);
  static Tensor FromInts(DType dtype, Shape shape, const std::vector<int64_t>& values);

  DType dtype() const { return spec_.dtype; }
  const Shape& shape() const { return spec_.shape; }
  const TensorSpec& spec() const { return spec_; }
  int64_t dim(int i) const { return spec_.shape[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(spec_.shape.size()); }
  int64_t numel() const;
  // False for a ShapeOnly tensor, whose bytes must not be read.
  bool has_data() const { return !shape_only_; }
  size_t nbytes() const { return buffer_ != nullptr ? buffer_->size() : bytes_.size(); }

  void* data() { return buffer_ != nullptr ? buffer_->data() : bytes_.data(); }
  const void* data() const { return buffer_ != nullptr ? buffer_->data() : bytes_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }
  std::string_view bytes() const {
    return std::string_view(static_cast<const char*>(data()), nbytes());
  }
  // The HostBuffer that holds the bytes, or nullptr when a string holds them.
  const std::shared_ptr<HostBuffer>& buffer() const { return buffer_; }
  // The GPU whose memory holds the bytes (a tensor in a CUDA shared-memory region), -1 when
  // they are in host memory. REQUIRES of every method that reads the bytes (data() aside):
  // device() == -1.
  int device() const { return buffer_ != nullptr ? buffer_->device() : -1; }
  // Moves the bytes out (copied when a HostBuffer holds them); the tensor is left empty.
  std::string ReleaseBytes() &&;

  // Element i as float (floating dtypes), or as the integer value converted (integer, bool).
  float GetFloat(int64_t i) const;
  void SetFloat(int64_t i, float value);
  // Element i as int64 (integer and bool dtypes). REQUIRES: integer or bool dtype.
  int64_t GetInt(int64_t i) const;
  // All elements as float / double / int64.
  std::vector<float> ToFloats() const;
  std::vector<double> ToDoubles() const;
  std::vector<int64_t> ToInts() const;

 private:
  TensorSpec spec_;
  std::string bytes_;                   // the bytes, unless buffer_ is set
  std::shared_ptr<HostBuffer> buffer_;  // the bytes when set (bytes_ is then empty)
  bool shape_only_ = false;             // ShapeOnly: no bytes at all
};

// Inputs and outputs of a kernel, by name.
using TensorMap = std::map<std::string, Tensor>;
using TensorSpecMap = std::map<std::string, TensorSpec>;

TensorSpecMap SpecsOf(const TensorMap& tensors);

// prod(shape) * itemsize of a tensor of `spec`; InvalidArgument if a dim is negative or the
// count overflows int64.
absl::StatusOr<int64_t> SpecBytes(const TensorSpec& spec);
// The sum of SpecBytes over `specs`, saturating at INT64_MAX (a spec that fails SpecBytes
// counts as INT64_MAX).
int64_t SpecsBytes(const TensorSpecMap& specs);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_TENSOR_H_
