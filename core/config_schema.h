// ConfigSchema: the config fields of one platform implementation of a kernel, declared once by
// the platform (like a kernel's params, core/schema.h) and read by every layer that would
// otherwise name them: the config check, ListKernels, the CLI and the clients.
#ifndef KERNELSERVE_CORE_CONFIG_SCHEMA_H_
#define KERNELSERVE_CORE_CONFIG_SCHEMA_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/kernel_config.h"

namespace kernelserve {

// The type of a config field's value.
enum class ConfigFieldKind {
  kInt,     // an integer within [min, max]
  kChoice,  // a name among `choices`, or "" (the default variant)
};
// "int", "choice".
std::string_view ConfigFieldKindName(ConfigFieldKind kind);

// One config field. A value type. A field named like a fixed field of KernelConfig
// (IsFixedConfigField: block_q, ..., block_size, algorithm) is that field; any other name is a
// named field (KernelConfig::named), always of kind kInt.
struct ConfigFieldSchema {
  std::string name;  // "threads"
  ConfigFieldKind kind = ConfigFieldKind::kInt;
  int64_t min = 0;  // inclusive bounds of a kInt field
  int64_t max = 0;
  std::vector<std::string> choices;  // of a kChoice field ("" is always allowed)
  // What leaving the field out (0 or "") means, for people: "one per hardware thread", "64".
  std::string default_value;
  std::string doc;  // a noun phrase: "worker threads", "cuDNN's execution plan"
  // The fixed field that carried this field's meaning on this platform before config schema 2
  // ("num_warps" for the CPU's threads), "" when none: a config setting it is refused with a
  // message naming this field.
  std::string replaces;
};

// A kInt field; `replaces` as ConfigFieldSchema::replaces.
ConfigFieldSchema IntConfigField(std::string name, int64_t min, int64_t max,
                                 std::string default_value, std::string doc,
                                 std::string replaces = "");
// A kChoice field.
ConfigFieldSchema ChoiceConfigField(std::string name, std::vector<std::string> choices,
                                    std::string default_value, std::string doc);

// A platform's config fields. platform and priority are every platform's and never declared.
// A value type.
struct ConfigSchema {
  std::vector<ConfigFieldSchema> fields;

  // nullptr when there is no field of that name.
  const ConfigFieldSchema* Find(std::string_view name) const;
  // "block_q, block_k, threads" ("none" when there are no fields).
  std::string FieldNames() const;

  // OK when every declared field of `config` is in its range or among its choices, every fixed
  // field the schema does not declare is 0 or empty, and every named field is declared.
  // InvalidArgument otherwise, naming `what` ("mean_pooling on cpu"), the first offending field,
  // its value and what was expected; a fixed field used in its meaning before schema 2 names the
  // field that replaced it. Configs are checked this way before anything is sized from them.
  absl::Status Check(const KernelConfig& config, std::string_view what) const;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_CONFIG_SCHEMA_H_
