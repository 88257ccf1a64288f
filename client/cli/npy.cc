#include "client/cli/npy.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve::npy {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";

absl::string_view Descr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kBF16:
      return "<u2";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
    case DType::kBool:
      return "|b1";
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return "|u1";
  }
  return "";
}

absl::StatusOr<DType> DTypeOfDescr(absl::string_view descr, const ReadOptions& options) {
  if (descr == "<f4") return DType::kF32;
  if (descr == "<f2") return DType::kF16;
  if (descr == "<i4") return DType::kI32;
  if (descr == "<i8") return DType::kI64;
  if (descr == "|b1") return DType::kBool;
  if (descr == "<u2" && options.u2_as_bf16) return DType::kBF16;
  if (descr == "|u1" && options.u1_as_fp8.has_value() && IsFp8(*options.u1_as_fp8)) {
    return *options.u1_as_fp8;
  }
  if (descr == "|u1") {
    return absl::InvalidArgumentError(
        "npy: dtype '|u1' (uint8) is read only as fp8 bits, and neither f8_e4m3 nor f8_e5m2 "
        "was asked for (name it: NAME=f8_e4m3:FILE)");
  }
  if (descr == "<u2") {
    return absl::InvalidArgumentError(
        "npy: dtype '<u2' (uint16) is read only as bf16 bits, and bf16 was not asked for");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "npy: unsupported dtype '", descr,
      "': expected '<f4', '<f2', '<i4', '<i8', '|b1' (or '<u2' as bf16, '|u1' as fp8); save as "
      "float32 or "
      "little-endian"));
}

// The text after "'key':" in the header dict, leading spaces removed.
absl::StatusOr<absl::string_view> ValueOf(absl::string_view header, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t pos = header.find(quoted);
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header has no ", quoted, ": ", header));
  }
  pos = header.find(':', pos + quoted.size());
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header lacks ':' after ", quoted));
  }
  return absl::StripLeadingAsciiWhitespace(header.substr(pos + 1));
}

absl::StatusOr<absl::string_view> ParseDescr(absl::string_view header) {
  KS_ASSIGN_OR_RETURN(absl::string_view text, ValueOf(header, "descr"));
  if (text.empty() || (text[0] != '\'' && text[0] != '"')) {
    return absl::InvalidArgumentError(
        "npy: 'descr' is not a string (structured dtypes are "
        "not supported)");
  }
  const size_t end = text.find(text[0], 1);
  if (end == absl::string_view::npos) return absl::InvalidArgumentError("npy: unterminated descr");
  return text.substr(1, end - 1);
}

absl::StatusOr<Shape> ParseShape(absl::string_view header) {
  KS_ASSIGN_OR_RETURN(absl::string_view text, ValueOf(header, "shape"));
  const size_t end = text.find(')');
  if (text.empty() || text[0] != '(' || end == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: 'shape' is not a tuple: ", text));
  }
  Shape shape;
  for (absl::string_view part : absl::StrSplit(text.substr(1, end - 1), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (part.back() == 'L') part.remove_suffix(1);  // written by Python 2
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("npy: bad dimension '", part, "' in shape"));
    }
    shape.push_back(dim);
  }
  return shape;
}

}  // namespace

std::string Encode(const Tensor& tensor) {
  std::string dims = absl::StrJoin(tensor.shape(), ", ");
  if (tensor.rank() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '", Descr(tensor.dtype()),
                                    "', 'fortran_order': False, 'shape': (", dims, "), }");
  // Preamble: magic, 2 version bytes, a 2-byte (v1) or 4-byte (v2) length.
  const bool v2 = header.size() + 1 + 64 > 65535;
  const size_t preamble = kMagic.size() + 2 + (v2 ? 4 : 2);
  const size_t padded = ((preamble + header.size() + 1 + 63) / 64) * 64 - preamble;
  header.append(padded - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  const int length_bytes = v2 ? 4 : 2;
  for (int i = 0; i < length_bytes; ++i) out.push_back(static_cast<char>(padded >> (8 * i)));
  out += header;
  out += tensor.bytes();
  return out;
}

absl::StatusOr<Tensor> Decode(std::string_view std_bytes, const ReadOptions& options) {
  const absl::string_view bytes = Sv(std_bytes);
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("npy: not a .npy file (bad magic)");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  if (major < 1 || major > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: unsupported format version ", major, ": expected 1, 2 or 3"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  }
  const size_t start = 8 + length_bytes;
  if (bytes.size() < start || header_len > bytes.size() - start) {
    return absl::InvalidArgumentError("npy: truncated header");
  }
  const absl::string_view header = bytes.substr(start, header_len);
  KS_ASSIGN_OR_RETURN(absl::string_view descr, ParseDescr(header));
  KS_ASSIGN_OR_RETURN(DType dtype, DTypeOfDescr(descr, options));
  KS_ASSIGN_OR_RETURN(absl::string_view fortran, ValueOf(header, "fortran_order"));
  if (!absl::StartsWith(fortran, "False")) {
    return absl::InvalidArgumentError(
        "npy: fortran_order arrays are not supported: save np.ascontiguousarray(a)");
  }
  KS_ASSIGN_OR_RETURN(Shape shape, ParseShape(header));
  absl::StatusOr<Tensor> tensor =
      Tensor::FromBytes(dtype, std::move(shape), std::string(bytes.substr(start + header_len)));
  if (!tensor.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("npy: ", tensor.status().message()));
  }
  return tensor;
}

std::string BitsNote(const std::string& path, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return absl::StrCat("note: ", path, " holds bf16 bits as '<u2' (numpy has no bfloat16)\n");
    case DType::kF8E4M3:
      return absl::StrCat("note: ", path,
                          " holds f8_e4m3 bits as '|u1' (numpy has no fp8; view them as "
                          "ml_dtypes.float8_e4m3fn)\n");
    case DType::kF8E5M2:
      return absl::StrCat("note: ", path,
                          " holds f8_e5m2 bits as '|u1' (numpy has no fp8; view them as "
                          "ml_dtypes.float8_e5m2)\n");
    case DType::kF32:
    case DType::kF16:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return "";
  }
  return "";
}

absl::Status Write(const std::string& path, const Tensor& tensor) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::NotFoundError(absl::StrCat("npy: cannot create '", path, "'"));
  const std::string bytes = Encode(tensor);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("npy: writing '", path, "' failed"));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Read(const std::string& path, const ReadOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("npy: cannot open '", path, "'"));
  std::stringstream bytes;
  bytes << file.rdbuf();
  absl::StatusOr<Tensor> tensor = Decode(bytes.str(), options);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat("'", path, "': ", tensor.status().message()));
  }
  return tensor;
}

}  // namespace kernelserve::npy
