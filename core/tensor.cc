#include "core/tensor.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

// Byte count of a tensor; InvalidArgument on a negative dim or an overflow.
absl::StatusOr<size_t> ByteCount(DType dtype, const Shape& shape) {
  absl::StatusOr<int64_t> bytes = SpecBytes(TensorSpec{dtype, shape});
  if (!bytes.ok()) return bytes.status();
  return static_cast<size_t>(*bytes);
}

}  // namespace

std::string ShapeString(const Shape& shape) {
  if (shape.size() > kMaxShapeStringDims) {
    return absl::StrCat("a shape of ", shape.size(), " dims");
  }
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  int64_t product = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), ": dim ", i, " is negative (", shape[i], ")"));
    }
    if (__builtin_mul_overflow(product, shape[i], &product)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), ": element count overflows int64"));
    }
  }
  return product;
}

std::string TensorSpec::DebugString() const {
  return absl::StrCat(Sv(DTypeName(dtype)), ShapeString(shape));
}

Tensor::Tensor(const Tensor& other) : spec_(other.spec_), shape_only_(other.shape_only_) {
  if (other.buffer_ != nullptr && other.buffer_->view()) {
    buffer_ = other.buffer_;
  } else {
    bytes_ = std::string(other.bytes());
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

std::string Tensor::ReleaseBytes() && {
  std::string out = buffer_ != nullptr ? std::string(bytes()) : std::move(bytes_);
  buffer_.reset();
  bytes_.clear();
  return out;
}

absl::StatusOr<Tensor> Tensor::FromBuffer(DType dtype, Shape shape,
                                          std::shared_ptr<HostBuffer> buffer) {
  absl::StatusOr<size_t> expected = ByteCount(dtype, shape);
  if (!expected.ok()) return expected.status();
  if (buffer->size() != *expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Sv(DTypeName(dtype)),
                                                   ShapeString(shape), ": expected ", *expected,
                                                   " bytes, got ", buffer->size()));
  }
  Tensor tensor;
  tensor.spec_.dtype = dtype;
  tensor.spec_.shape = std::move(shape);
  tensor.buffer_ = std::move(buffer);
  return tensor;
}

Tensor Tensor::Empty(DType dtype, Shape shape) {
  Tensor tensor;
  const size_t bytes = ByteCount(dtype, shape).value_or(0);
  tensor.spec_.dtype = dtype;
  tensor.spec_.shape = std::move(shape);
  tensor.bytes_.resize(bytes);
  return tensor;
}

Tensor Tensor::ShapeOnly(DType dtype, Shape shape) {
  Tensor tensor;
  tensor.spec_.dtype = dtype;
  tensor.spec_.shape = std::move(shape);
  tensor.shape_only_ = true;
  return tensor;
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor tensor = Empty(dtype, std::move(shape));
  std::memset(tensor.bytes_.data(), 0, tensor.bytes_.size());
  return tensor;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, Shape shape, std::string bytes) {
  absl::StatusOr<size_t> expected = ByteCount(dtype, shape);
  if (!expected.ok()) return expected.status();
  if (bytes.size() != *expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Sv(DTypeName(dtype)),
                                                   ShapeString(shape), ": expected ", *expected,
                                                   " bytes, got ", bytes.size()));
  }
  Tensor tensor;
  tensor.spec_.dtype = dtype;
  tensor.spec_.shape = std::move(shape);
  tensor.bytes_ = std::move(bytes);
  return tensor;
}

Tensor Tensor::FromFloats(DType dtype, Shape shape, const std::vector<float>& values) {
  Tensor tensor = Empty(dtype, std::move(shape));
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    tensor.SetFloat(i, values[static_cast<size_t>(i)]);
  }
  return tensor;
}

Tensor Tensor::FromInts(DType dtype, Shape shape, const std::vector<int64_t>& values) {
  Tensor tensor = Empty(dtype, std::move(shape));
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    const int64_t v = values[static_cast<size_t>(i)];
    switch (dtype) {
      case DType::kI32:
        tensor.data_as<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kI64:
        tensor.data_as<int64_t>()[i] = v;
        break;
      case DType::kBool:
        tensor.data_as<uint8_t>()[i] = v != 0 ? 1 : 0;
        break;
      default:
        tensor.SetFloat(i, static_cast<float>(v));
        break;
    }
  }
  return tensor;
}

int64_t Tensor::numel() const { return NumElements(spec_.shape).value_or(0); }

float Tensor::GetFloat(int64_t i) const {
  switch (spec_.dtype) {
    case DType::kF32:
      return data_as<float>()[i];
    case DType::kF16:
      return HalfToFloat(data_as<uint16_t>()[i]);
    case DType::kBF16:
      return BFloat16ToFloat(data_as<uint16_t>()[i]);
    case DType::kF8E4M3:
      return F8E4M3ToFloat(data_as<uint8_t>()[i]);
    case DType::kF8E5M2:
      return F8E5M2ToFloat(data_as<uint8_t>()[i]);
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return static_cast<float>(GetInt(i));
  }
  return 0.0f;
}

void Tensor::SetFloat(int64_t i, float value) {
  switch (spec_.dtype) {
    case DType::kF32:
      data_as<float>()[i] = value;
      return;
    case DType::kF16:
      data_as<uint16_t>()[i] = FloatToHalf(value);
      return;
    case DType::kBF16:
      data_as<uint16_t>()[i] = FloatToBFloat16(value);
      return;
    case DType::kF8E4M3:
      data_as<uint8_t>()[i] = FloatToF8E4M3(value);
      return;
    case DType::kF8E5M2:
      data_as<uint8_t>()[i] = FloatToF8E5M2(value);
      return;
    case DType::kI32:
      data_as<int32_t>()[i] = static_cast<int32_t>(value);
      return;
    case DType::kI64:
      data_as<int64_t>()[i] = static_cast<int64_t>(value);
      return;
    case DType::kBool:
      data_as<uint8_t>()[i] = value != 0.0f ? 1 : 0;
      return;
  }
}

int64_t Tensor::GetInt(int64_t i) const {
  switch (spec_.dtype) {
    case DType::kI32:
      return data_as<int32_t>()[i];
    case DType::kI64:
      return data_as<int64_t>()[i];
    case DType::kBool:
      return data_as<uint8_t>()[i] != 0 ? 1 : 0;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return static_cast<int64_t>(GetFloat(i));
  }
  return 0;
}

std::vector<float> Tensor::ToFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = GetFloat(static_cast<int64_t>(i));
  return out;
}

std::vector<double> Tensor::ToDoubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    out[i] = HoldsFloats(spec_.dtype) ? static_cast<double>(GetFloat(index))
                                      : static_cast<double>(GetInt(index));
  }
  return out;
}

std::vector<int64_t> Tensor::ToInts() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = GetInt(static_cast<int64_t>(i));
  return out;
}

TensorSpecMap SpecsOf(const TensorMap& tensors) {
  TensorSpecMap specs;
  for (const auto& [name, tensor] : tensors) specs[name] = tensor.spec();
  return specs;
}

absl::StatusOr<int64_t> SpecBytes(const TensorSpec& spec) {
  absl::StatusOr<int64_t> count = NumElements(spec.shape);
  if (!count.ok()) return count.status();
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*count, static_cast<int64_t>(ItemSize(spec.dtype)), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(spec.shape), ": byte count overflows int64"));
  }
  return bytes;
}

int64_t SpecsBytes(const TensorSpecMap& specs) {
  int64_t total = 0;
  for (const auto& [name, spec] : specs) {
    const int64_t bytes = SpecBytes(spec).value_or(INT64_MAX);
    if (__builtin_add_overflow(total, bytes, &total)) return INT64_MAX;
  }
  return total;
}

}  // namespace kernelserve
