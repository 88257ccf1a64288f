// Scalar attributes of a call (causal, window, soft cap, scale, chunk size...).
#ifndef KERNELSERVE_CORE_ATTRIBUTES_H_
#define KERNELSERVE_CORE_ATTRIBUTES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/statusor.h"

namespace kernelserve {

using AttrValue = std::variant<bool, int64_t, double, std::string>;
// Ordered by name so that iteration (and hence the cache key) is stable.
using Attributes = std::map<std::string, AttrValue>;

// Typed reads. Absent -> `fallback`; present with another type -> InvalidArgument naming the
// attribute and the expected type. Integers are accepted where a double is asked for.
absl::StatusOr<bool> GetBoolAttr(const Attributes& attrs, const std::string& name, bool fallback);
absl::StatusOr<int64_t> GetIntAttr(const Attributes& attrs, const std::string& name,
                                   int64_t fallback);
absl::StatusOr<double> GetDoubleAttr(const Attributes& attrs, const std::string& name,
                                     double fallback);
// Absent -> nullopt.
absl::StatusOr<std::optional<int64_t>> GetOptionalIntAttr(const Attributes& attrs,
                                                          const std::string& name);

// "true", "16", "0.5", "\"text\"".
std::string AttrValueString(const AttrValue& value);
// "{causal=true, window_left=16}".
std::string AttributesString(const Attributes& attrs);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_ATTRIBUTES_H_
