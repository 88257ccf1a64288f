// A small reader and writer of NumPy's .npy format (versions 1.0 and 2.0, C order,
// little-endian).
//
// dtypes: f32 '<f4', f16 '<f2', i32 '<i4', i64 '<i8', bool '|b1'. NumPy has no bfloat16, so
// bf16 tensors are written as '<u2' (the raw bits; `x.view(np.uint16)` on the Python side),
// and '<u2' is read back as bf16 only when the caller asks for it. Likewise fp8 (f8_e4m3,
// f8_e5m2) as '|u1' bits (`x.view(ml_dtypes.float8_e4m3fn)` / `float8_e5m2` in Python), read
// back as the fp8 dtype the caller names.
// All functions are pure and thread-safe.
#ifndef KERNELSERVE_CLIENT_CLI_NPY_H_
#define KERNELSERVE_CLIENT_CLI_NPY_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace kernelserve::npy {

// Options of Decode and Read. Every field has a default.
struct ReadOptions {
  bool u2_as_bf16 = false;  // read '<u2' data as bf16 bits; otherwise '<u2' is an error
  // Read '|u1' data as bits of this dtype (kF8E4M3 or kF8E5M2); unset, '|u1' is an error.
  std::optional<DType> u1_as_fp8;
};

// The .npy bytes of `tensor`.
std::string Encode(const Tensor& tensor);
// Parses .npy bytes. InvalidArgument naming what is wrong: bad magic, unsupported version or
// dtype, fortran_order, big-endian data, or a data size that does not match the shape.
absl::StatusOr<Tensor> Decode(std::string_view bytes, const ReadOptions& options = {});

// "note: PATH holds bf16 bits as '<u2' (...)\n" for a dtype written as the bits of an unsigned
// integer (bf16, fp8), "" for the others.
std::string BitsNote(const std::string& path, DType dtype);

// File forms. NotFound / PermissionDenied style errors name the path.
absl::Status Write(const std::string& path, const Tensor& tensor);
absl::StatusOr<Tensor> Read(const std::string& path, const ReadOptions& options = {});

}  // namespace kernelserve::npy

#endif  // KERNELSERVE_CLIENT_CLI_NPY_H_
