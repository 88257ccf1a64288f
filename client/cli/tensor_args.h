// The value syntaxes of resident tensors on the command line: --tensor and --output-to of run
// and bench, and the flags of `tensor create|read`.
// All functions are pure and thread-safe.
#ifndef KERNELSERVE_CLIENT_CLI_TENSOR_ARGS_H_
#define KERNELSERVE_CLIENT_CLI_TENSOR_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli/args.h"
#include "core/tensor.h"

namespace kernelserve::cli {

// --tensor NAME=@TENSOR (input NAME from the caller's resident tensor TENSOR) and --output-to
// OUT=@TENSOR (output OUT written into it): {NAME, TENSOR}. `flag` names the flag in errors.
absl::StatusOr<std::pair<std::string, std::string>> ParseResidentArg(const std::string& flag,
                                                                     const std::string& text);

// `tensor create --input-like`: DTYPE:D0,D1,... (zeros of that dtype and shape; dtype default
// f32) or [DTYPE:]FILE.npy (the file's dtype, shape and contents; bf16 reads '<u2' files as
// bf16 bits). A value type.
struct LikeArg {
  TensorSpec spec;             // for DTYPE:D0,D1,...
  std::string path;            // the .npy file; "" for DTYPE:D0,D1,...
  std::optional<DType> dtype;  // the dtype the file must hold, when given
};
absl::StatusOr<LikeArg> ParseLikeArg(const std::string& text);

// `tensor read --rows`: A:B (rows A to B-1 of dimension 0), A: (from A to the last row), :B.
struct RowsArg {
  int64_t row = 0;
  std::optional<int64_t> rows;  // unset = to the last row
};
absl::StatusOr<RowsArg> ParseRowsArg(const std::string& text);

// --ttl DURATION (250ms rounds up to 1s; 0 = the server's default): whole seconds.
// InvalidArgument for a bad duration or one past 2^32 - 1 seconds.
absl::StatusOr<uint32_t> TtlFromArgs(const Args& args);

// A range [offset, offset + size) of bytes or rows.
struct Piece {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool operator==(const Piece& other) const = default;
};
// `total` split into pieces of at most `most` each, in order (none for 0), every piece but the
// last a multiple of `unit` (a piece of `most` rounded down to units, of one unit when `most`
// is less). REQUIRES: unit >= 1.
std::vector<Piece> SplitInto(uint64_t total, uint64_t most, uint64_t unit);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_TENSOR_ARGS_H_
