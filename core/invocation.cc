#include "core/invocation.h"

#include <openssl/evp.h>

#include <variant>

#include "absl/strings/escaping.h"
#include "nlohmann/json.hpp"

namespace kernelserve {
namespace {

using Json = nlohmann::json;  // object keys kept in a std::map, hence sorted

Json AttrToJson(const AttrValue& value) {
  return std::visit([](const auto& v) { return Json(v); }, value);
}

Json SpecToJson(const TensorSpec& spec) {
  Json json = Json::object();
  json["dtype"] = std::string(DTypeName(spec.dtype));
  json["shape"] = spec.shape;
  return json;
}

}  // namespace

std::string Invocation::StableJson() const {
  Json attrs = Json::object();
  for (const auto& [name, value] : attributes) attrs[name] = AttrToJson(value);
  Json specs = Json::object();
  for (const auto& [name, spec] : inputs) specs[name] = SpecToJson(spec);
  Json json = Json::object();
  json["attributes"] = std::move(attrs);
  json["device"] = Json::parse(device.ToJson(), nullptr, /*allow_exceptions=*/false);
  json["inputs"] = std::move(specs);
  json["kernel"] = kernel_id;
  json["platform"] = platform;
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Invocation::CacheKey() const { return kernel_id + ":" + ShortSha256(StableJson()); }

std::string ShortSha256(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    return std::string(16, '0');  // unreachable with a working libcrypto
  }
  std::string hex =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
  return hex.substr(0, 16);
}

}  // namespace kernelserve
