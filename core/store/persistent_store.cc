#include "core/store/persistent_store.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/store/json_depth.h"

namespace kernelserve {
namespace {

constexpr int kStoredConfigSchema = 1;

using Json = nlohmann::json;

// Reads `object[key]` into `out`; InvalidArgument when it has the wrong type, or is absent and
// `required`.
template <typename T>
absl::Status ReadField(const Json& object, const char* key, Json::value_t kind, bool required,
                       T* out) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("stored config: missing required field '", key, "'"));
  }
  const bool number_ok = (kind == Json::value_t::number_float && it->is_number()) ||
                         (kind == Json::value_t::number_integer && it->is_number_integer());
  if (!number_ok && it->type() != kind) {
    return absl::InvalidArgumentError(absl::StrCat("stored config: field '", key,
                                                   "' has the wrong type (", it->type_name(), ")"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

std::string StoredConfig::ToJson() const {
  Json j;
  j["schema"] = kStoredConfigSchema;
  j["config"] = Json::parse(config.ToJson(), nullptr, /*allow_exceptions=*/false);
  j["kernel"] = kernel_id;
  j["fingerprint"] = fingerprint_hash;
  j["key"] = cache_key;
  j["measured_seconds"] = measured_seconds;
  j["origin"] = origin;
  j["host"] = host;
  j["stored_at_unix_ms"] = stored_at_unix_ms;
  return j.dump();
}

absl::StatusOr<StoredConfig> StoredConfig::FromJson(std::string_view json) {
  KS_RETURN_IF_ERROR(CheckJsonDepth(json, "stored config"));
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("stored config: expected a JSON object");
  }
  auto schema = j.find("schema");
  if (schema == j.end() || !schema->is_number_integer() ||
      schema->get<int64_t>() != kStoredConfigSchema) {
    return absl::InvalidArgumentError(
        absl::StrCat("stored config: expected \"schema\":", kStoredConfigSchema, ", got ",
                     schema == j.end() ? std::string("none") : schema->dump()));
  }
  auto config = j.find("config");
  if (config == j.end() || !config->is_object()) {
    return absl::InvalidArgumentError("stored config: expected a \"config\" object");
  }
  StoredConfig out;
  absl::StatusOr<KernelConfig> kernel_config = KernelConfig::FromJson(config->dump());
  if (absl::IsFailedPrecondition(kernel_config.status())) {
    // Written under another config schema (before named fields): a miss, not damage.
    return absl::NotFoundError(absl::StrCat("stored config: ", kernel_config.status().message()));
  }
  KS_RETURN_IF_ERROR(kernel_config.status());
  out.config = *std::move(kernel_config);
  using V = Json::value_t;
  KS_RETURN_IF_ERROR(ReadField(j, "kernel", V::string, true, &out.kernel_id));
  KS_RETURN_IF_ERROR(ReadField(j, "fingerprint", V::string, true, &out.fingerprint_hash));
  KS_RETURN_IF_ERROR(ReadField(j, "key", V::string, true, &out.cache_key));
  KS_RETURN_IF_ERROR(
      ReadField(j, "measured_seconds", V::number_float, false, &out.measured_seconds));
  KS_RETURN_IF_ERROR(ReadField(j, "origin", V::string, false, &out.origin));
  KS_RETURN_IF_ERROR(ReadField(j, "host", V::string, false, &out.host));
  KS_RETURN_IF_ERROR(
      ReadField(j, "stored_at_unix_ms", V::number_integer, false, &out.stored_at_unix_ms));
  return out;
}

}  // namespace kernelserve
