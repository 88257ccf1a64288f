#include "core/store/json_depth.h"

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve {

absl::Status CheckJsonDepth(std::string_view json, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(
            absl::StrCat(Sv(what), ": JSON nested more than ", max_depth, " levels deep"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
