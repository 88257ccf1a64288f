// Bridges std::string_view and absl::string_view.
//
// The Debian build of Abseil is configured with ABSL_OPTION_USE_STD_STRING_VIEW 0, so
// absl::string_view is a distinct type and absl::StrCat / StrJoin / StrFormat do not accept a
// std::string_view argument. Wrap such arguments with Sv(): absl::StrCat("dtype ", Sv(name)).
#ifndef KERNELSERVE_CORE_UTILS_STRING_VIEW_H_
#define KERNELSERVE_CORE_UTILS_STRING_VIEW_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace kernelserve {

// A view of the same characters; no copy. The result borrows `text`'s storage.
inline absl::string_view Sv(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

// The reverse direction, for absl APIs that return absl::string_view.
inline std::string_view StdSv(absl::string_view text) {
  return std::string_view(text.data(), text.size());
}

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_STRING_VIEW_H_
