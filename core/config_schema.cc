#include "core/config_schema.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

// "0..1024" or "'wgmma' or empty".
std::string Expected(const ConfigFieldSchema& field) {
  if (field.kind == ConfigFieldKind::kInt) return absl::StrCat(field.min, "..", field.max);
  return absl::StrCat("'", absl::StrJoin(field.choices, "', '"), "' or empty");
}

// The refusal of `name` (set to `value`), a field `schema` does not declare.
absl::Status NotAField(const ConfigSchema& schema, std::string_view name, std::string_view value,
                       std::string_view what) {
  for (const ConfigFieldSchema& field : schema.fields) {
    if (field.replaces == name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config ", Sv(name), "=", Sv(value), ": ", Sv(name), " is not a field of ", Sv(what),
          "; the field for ", field.doc, " is '", field.name, "' (", Expected(field), ")"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("config ", Sv(name), "=", Sv(value), ": ",
                                                 Sv(name), " is not a field of ", Sv(what),
                                                 " (its fields: ", schema.FieldNames(), ")"));
}

absl::Status CheckInt(const ConfigFieldSchema& field, int64_t value, std::string_view what) {
  if (field.kind == ConfigFieldKind::kInt && value >= field.min && value <= field.max) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("config ", field.name, "=", value,
                                                 " is out of range for ", Sv(what), ": expected ",
                                                 Expected(field)));
}

// `text` in quotes, cut after 64 characters (client text in messages stays short).
std::string Quoted(std::string_view text) {
  return absl::StrCat("'", Sv(text.substr(0, 64)), text.size() > 64 ? "..." : "", "'");
}

absl::Status CheckAlgorithm(const ConfigSchema& schema, const std::string& value,
                            std::string_view what) {
  if (value.empty()) return absl::OkStatus();
  const ConfigFieldSchema* field = schema.Find("algorithm");
  if (field == nullptr) return NotAField(schema, "algorithm", Quoted(value), what);
  for (const std::string& choice : field->choices) {
    if (choice == value) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("config algorithm=", Quoted(value),
                                                 " is not a variant of ", Sv(what), ": expected ",
                                                 Expected(*field)));
}

}  // namespace

std::string_view ConfigFieldKindName(ConfigFieldKind kind) {
  return kind == ConfigFieldKind::kInt ? "int" : "choice";
}

ConfigFieldSchema IntConfigField(std::string name, int64_t min, int64_t max,
                                 std::string default_value, std::string doc, std::string replaces) {
  ConfigFieldSchema field;
  field.name = std::move(name);
  field.min = min;
  field.max = max;
  field.default_value = std::move(default_value);
  field.doc = std::move(doc);
  field.replaces = std::move(replaces);
  return field;
}

ConfigFieldSchema ChoiceConfigField(std::string name, std::vector<std::string> choices,
                                    std::string default_value, std::string doc) {
  ConfigFieldSchema field;
  field.name = std::move(name);
  field.kind = ConfigFieldKind::kChoice;
  field.choices = std::move(choices);
  field.default_value = std::move(default_value);
  field.doc = std::move(doc);
  return field;
}

const ConfigFieldSchema* ConfigSchema::Find(std::string_view name) const {
  for (const ConfigFieldSchema& field : fields) {
    if (field.name == name) return &field;
  }
  return nullptr;
}

std::string ConfigSchema::FieldNames() const {
  if (fields.empty()) return "none";
  return absl::StrJoin(fields, ", ", [](std::string* out, const ConfigFieldSchema& field) {
    out->append(field.name);
  });
}

absl::Status ConfigSchema::Check(const KernelConfig& config, std::string_view what) const {
  for (const FixedIntField& fixed : FixedIntFields()) {
    const int value = config.*fixed.member;
    const ConfigFieldSchema* field = Find(fixed.name);
    if (field == nullptr) {
      if (value != 0) return NotAField(*this, fixed.name, absl::StrCat(value), what);
      continue;
    }
    absl::Status status = CheckInt(*field, value, what);
    if (!status.ok()) return status;
  }
  absl::Status status = CheckAlgorithm(*this, config.algorithm, what);
  if (!status.ok()) return status;
  for (const auto& [name, value] : config.named) {
    const ConfigFieldSchema* field = Find(name);
    if (field == nullptr || IsFixedConfigField(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config ", Quoted(name), "=", value, ": ",
                       IsFixedConfigField(name) ? "a fixed field set as a named one; " : "",
                       "not a field of ", Sv(what), " (its fields: ", FieldNames(), ")"));
    }
    status = CheckInt(*field, value, what);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
