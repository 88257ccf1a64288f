// A bound on the nesting of the JSON the store tiers decode. nlohmann's parser and destructor
// are iterative, but dump() recurses once per level, and the decoders dump parts of what they
// parse: a value nested a few hundred thousand levels deep (a few hundred KiB of "[" in a
// Redis value or the store file) would overflow the stack.
#ifndef KERNELSERVE_CORE_STORE_JSON_DEPTH_H_
#define KERNELSERVE_CORE_STORE_JSON_DEPTH_H_

#include <string_view>

#include "absl/status/status.h"

namespace kernelserve {

// Deeper than anything the stores write (a file entry nests 4 levels).
inline constexpr int kMaxJsonDepth = 64;

// InvalidArgument naming `what` when `json` nests arrays and objects more than `max_depth`
// deep (brackets inside strings do not count). Says nothing else about whether it is JSON.
absl::Status CheckJsonDepth(std::string_view json, std::string_view what,
                            int max_depth = kMaxJsonDepth);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_JSON_DEPTH_H_
