#include "core/kernel_config.h"

#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/string_view.h"
#include "nlohmann/json.hpp"

namespace kernelserve {
namespace {

using Json = nlohmann::json;

struct IntField {
  const char* name;
  int KernelConfig::*member;
};
struct StringField {
  const char* name;
  std::string KernelConfig::*member;
};

constexpr IntField kIntFields[] = {
    {"block_q", &KernelConfig::block_q},       {"block_k", &KernelConfig::block_k},
    {"block_d", &KernelConfig::block_d},       {"num_warps", &KernelConfig::num_warps},
    {"num_stages", &KernelConfig::num_stages}, {"block_size", &KernelConfig::block_size},
    {"priority", &KernelConfig::priority},
};
constexpr FixedIntField kFixedIntFields[] = {
    {"block_q", &KernelConfig::block_q},       {"block_k", &KernelConfig::block_k},
    {"block_d", &KernelConfig::block_d},       {"num_warps", &KernelConfig::num_warps},
    {"num_stages", &KernelConfig::num_stages}, {"block_size", &KernelConfig::block_size},
};
constexpr StringField kStringFields[] = {
    {"platform", &KernelConfig::platform},
    {"algorithm", &KernelConfig::algorithm},
};
// The key of the named fields in the JSON form.
constexpr char kNamedKey[] = "fields";

// Reads an int field of `object` into `out` when present.
absl::Status ReadInt(const Json& object, const char* name, int* out) {
  auto it = object.find(name);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel config field '", name, "': expected an integer, got ", it->type_name()));
  }
  const bool fits =
      it->is_number_unsigned()
          ? it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
          : it->get<int64_t>() >= std::numeric_limits<int>::min() &&
                it->get<int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("kernel config field '", name, "': value ",
                                                   it->dump(), " does not fit in an int"));
  }
  const int64_t value = it->get<int64_t>();
  *out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status ReadString(const Json& object, const char* name, std::string* out) {
  auto it = object.find(name);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel config field '", name, "': expected a string, got ", it->type_name()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// Reads the named fields ("fields":{"threads":4}) of `object` into `out` when present.
absl::Status ReadNamed(const Json& object, std::map<std::string, int64_t, std::less<>>* out) {
  auto it = object.find(kNamedKey);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel config field '", kNamedKey,
                                                   "': expected an object, got ", it->type_name()));
  }
  for (const auto& [name, value] : it->items()) {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel config field '", name, "': expected a 64-bit integer, got ", value.dump()));
    }
    (*out)[name] = value.get<int64_t>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Span<const FixedIntField> FixedIntFields() { return kFixedIntFields; }

bool IsFixedConfigField(std::string_view name) {
  if (name == "algorithm") return true;
  for (const FixedIntField& field : kFixedIntFields) {
    if (name == field.name) return true;
  }
  return false;
}

int64_t KernelConfig::Named(std::string_view name) const {
  auto it = named.find(name);
  return it == named.end() ? 0 : it->second;
}

std::string KernelConfig::ToJson() const {
  Json json = Json::object();  // std::map underneath: keys come out sorted
  json["schema"] = kKernelConfigSchemaVersion;
  for (const IntField& field : kIntFields) json[field.name] = this->*field.member;
  for (const StringField& field : kStringFields) json[field.name] = this->*field.member;
  if (!named.empty()) {
    Json fields = Json::object();
    for (const auto& [name, value] : named) fields[name] = value;
    json[kNamedKey] = std::move(fields);
  }
  return json.dump();
}

absl::StatusOr<KernelConfig> KernelConfig::FromJson(std::string_view text) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel config is not valid JSON: ", Sv(text)));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel config: expected a JSON object, got ", json.type_name()));
  }
  auto schema = json.find("schema");
  if (schema == json.end() || !schema->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel config: expected \"schema\":", kKernelConfigSchemaVersion, ", got ",
                     schema == json.end()      ? "none"
                     : schema->is_structured() ? schema->type_name()
                                               : schema->dump()));
  }
  if (schema->get<int64_t>() != kKernelConfigSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel config: config schema ", schema->dump(), " is not the current ",
                     kKernelConfigSchemaVersion, " (written by another version)"));
  }
  KernelConfig config;
  for (const IntField& field : kIntFields) {
    absl::Status status = ReadInt(json, field.name, &(config.*field.member));
    if (!status.ok()) return status;
  }
  for (const StringField& field : kStringFields) {
    absl::Status status = ReadString(json, field.name, &(config.*field.member));
    if (!status.ok()) return status;
  }
  absl::Status status = ReadNamed(json, &config.named);
  if (!status.ok()) return status;
  return config;
}

std::string ExplainNotAmong(const KernelConfig& config, absl::Span<const KernelConfig> allowed) {
  if (allowed.empty()) return "no config is compiled for these inputs";
  for (const IntField& field : kIntFields) {
    if (field.member == &KernelConfig::priority) continue;
    std::set<int> values;
    for (const KernelConfig& c : allowed) values.insert(c.*field.member);
    if (values.contains(config.*field.member)) continue;
    return absl::StrCat(field.name, "=", config.*field.member, ": expected one of ",
                        absl::StrJoin(values, ", "));
  }
  for (const StringField& field : kStringFields) {
    if (field.member == &KernelConfig::platform) continue;
    std::set<std::string> values;
    for (const KernelConfig& c : allowed) values.insert(c.*field.member);
    if (values.contains(config.*field.member)) continue;
    return absl::StrCat(field.name, "='", config.*field.member, "': expected one of '",
                        absl::StrJoin(values, "', '"), "'");
  }
  std::set<std::string> names;
  for (const KernelConfig& c : allowed) {
    for (const auto& [name, value] : c.named) names.insert(name);
  }
  for (const auto& [name, value] : config.named) names.insert(name);
  for (const std::string& name : names) {
    std::set<int64_t> values;
    for (const KernelConfig& c : allowed) values.insert(c.Named(name));
    if (values.contains(config.Named(name))) continue;
    return absl::StrCat(name, "=", config.Named(name), ": expected one of ",
                        absl::StrJoin(values, ", "));
  }
  constexpr size_t kListed = 12;
  std::vector<std::string> listed;
  for (size_t i = 0; i < allowed.size() && i < kListed; ++i) {
    listed.push_back(absl::StrCat("{", allowed[i].DebugString(), "}"));
  }
  return absl::StrCat(
      "this combination is not compiled; expected one of ", absl::StrJoin(listed, ", "),
      allowed.size() > kListed ? absl::StrCat(" (", allowed.size(), " in all)") : std::string());
}

std::string KernelConfig::DebugString() const {
  std::vector<std::string> parts;
  for (const IntField& field : kIntFields) {
    if (field.name == std::string_view("priority")) continue;
    if (this->*field.member != 0)
      parts.push_back(absl::StrCat(field.name, "=", this->*field.member));
  }
  for (const StringField& field : kStringFields) {
    if (!(this->*field.member).empty()) {
      parts.push_back(absl::StrCat(field.name, "=", this->*field.member));
    }
  }
  for (const auto& [name, value] : named) parts.push_back(absl::StrCat(name, "=", value));
  if (priority != 0) parts.push_back(absl::StrCat("priority=", priority));
  return absl::StrJoin(parts, " ");
}

}  // namespace kernelserve
