#include "core/attributes.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

std::string_view TypeName(const AttrValue& value) {
  switch (value.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "double";
    default:
      return "string";
  }
}

absl::Status WrongType(const std::string& name, std::string_view expected, const AttrValue& value) {
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "': expected ", Sv(expected),
                                                 ", got ", Sv(TypeName(value))));
}

}  // namespace

absl::StatusOr<bool> GetBoolAttr(const Attributes& attrs, const std::string& name, bool fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  if (const bool* b = std::get_if<bool>(&it->second)) return *b;
  return WrongType(name, "bool", it->second);
}

absl::StatusOr<int64_t> GetIntAttr(const Attributes& attrs, const std::string& name,
                                   int64_t fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return *i;
  return WrongType(name, "int", it->second);
}

absl::StatusOr<double> GetDoubleAttr(const Attributes& attrs, const std::string& name,
                                     double fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  if (const double* d = std::get_if<double>(&it->second)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return WrongType(name, "double", it->second);
}

absl::StatusOr<std::optional<int64_t>> GetOptionalIntAttr(const Attributes& attrs,
                                                          const std::string& name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return std::optional<int64_t>();
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return std::optional<int64_t>(*i);
  return WrongType(name, "int", it->second);
}

std::string AttrValueString(const AttrValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  if (const double* d = std::get_if<double>(&value)) return absl::StrCat(*d);
  return absl::StrCat("\"", std::get<std::string>(value), "\"");
}

std::string AttributesString(const Attributes& attrs) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : attrs)
    parts.push_back(absl::StrCat(name, "=", AttrValueString(value)));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace kernelserve
