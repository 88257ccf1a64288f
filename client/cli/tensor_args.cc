#include "client/cli/tensor_args.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

constexpr absl::string_view kLikeForm =
    "DTYPE:D0,D1,... (zeros, e.g. f32:4,128) or [DTYPE:]FILE.npy (its contents, e.g. w.npy)";
constexpr absl::string_view kRowsForm =
    "A:B (rows A to B-1 of dimension 0; A: to the last row, :B from the first), e.g. 0:4";

absl::Status BadLike(const std::string& text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--input-like '", text, "': ", why, "expected ", kLikeForm));
}

// "4,128" -> {4,128}; nullopt unless every part is an integer >= 0.
std::optional<Shape> Dims(absl::string_view text) {
  Shape shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0) return std::nullopt;
    shape.push_back(dim);
  }
  return shape;
}

// A row number of --rows; nullopt for "".
absl::StatusOr<std::optional<int64_t>> Row(absl::string_view part, const std::string& text) {
  if (part.empty()) return std::optional<int64_t>();
  int64_t row = 0;
  if (!absl::SimpleAtoi(part, &row) || row < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rows '", text, "': '", part, "' is not a row >= 0; expected ", kRowsForm));
  }
  return std::optional<int64_t>(row);
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::string>> ParseResidentArg(const std::string& flag,
                                                                     const std::string& text) {
  const std::string what = flag == "output-to" ? "OUT" : "NAME";
  const std::string example = flag == "output-to" ? "out=@pooled" : "x=@weights";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= text.size() || text[eq + 1] != '@' ||
      eq + 2 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " '", text, "': expected ", what, "=@TENSOR (e.g. ", example,
                     "), TENSOR a resident tensor of yours (kernelserve tensor ls)"));
  }
  return std::make_pair(text.substr(0, eq), text.substr(eq + 2));
}

absl::StatusOr<LikeArg> ParseLikeArg(const std::string& text) {
  LikeArg like;
  std::string rest = text;
  const size_t colon = rest.find(':');
  if (colon != std::string::npos) {
    absl::StatusOr<DType> dtype = ParseDType(rest.substr(0, colon));
    if (dtype.ok()) {
      like.dtype = *dtype;
      rest = rest.substr(colon + 1);
    } else if (!absl::EndsWithIgnoreCase(rest, ".npy")) {  // else a path with a ':' in it
      return BadLike(text, absl::StrCat(dtype.status().message(), "; "));
    }
  }
  if (absl::EndsWithIgnoreCase(rest, ".npy")) {
    like.path = rest;
    return like;
  }
  std::optional<Shape> dims = rest.empty() ? std::nullopt : Dims(rest);
  if (!dims) return BadLike(text, "");
  like.spec = {like.dtype.value_or(DType::kF32), *std::move(dims)};
  like.dtype.reset();
  return like;
}

absl::StatusOr<RowsArg> ParseRowsArg(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--rows '", text, "': expected ", kRowsForm));
  }
  KS_ASSIGN_OR_RETURN(std::optional<int64_t> begin, Row(text.substr(0, colon), text));
  KS_ASSIGN_OR_RETURN(std::optional<int64_t> end, Row(text.substr(colon + 1), text));
  RowsArg rows;
  rows.row = begin.value_or(0);
  if (end.has_value()) {
    if (*end < rows.row) {
      return absl::InvalidArgumentError(absl::StrCat("--rows '", text, "': the end ", *end,
                                                     " is before the start ", rows.row,
                                                     "; expected ", kRowsForm));
    }
    rows.rows = *end - rows.row;
  }
  return rows;
}

absl::StatusOr<uint32_t> TtlFromArgs(const Args& args) {
  KS_ASSIGN_OR_RETURN(absl::Duration ttl, args.GetDuration("ttl", absl::ZeroDuration()));
  const double seconds = std::ceil(absl::ToDoubleSeconds(ttl));
  if (seconds > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ttl=", args.Get("ttl"), ": expected at most ", std::numeric_limits<uint32_t>::max(),
        " seconds (the server cuts it to its --max-resident-ttl anyway)"));
  }
  return static_cast<uint32_t>(seconds);
}

std::vector<Piece> SplitInto(uint64_t total, uint64_t most, uint64_t unit) {
  const uint64_t step = std::max(unit, most / unit * unit);
  std::vector<Piece> pieces;
  for (uint64_t offset = 0; offset < total; offset += step) {
    pieces.push_back({offset, std::min(step, total - offset)});
  }
  return pieces;
}

}  // namespace kernelserve::cli
