#include "core/invocation.h"

#include <openssl/evp.h>

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <variant>

#include "absl/container/flat_hash_map.h"

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

namespace {

// Appends `text` with its length first, so that concatenations stay unambiguous.
void AppendField(std::string_view text, std::string* out) {
  const uint64_t n = text.size();
  out->append(reinterpret_cast<const char*>(&n), sizeof(n));
  out->append(text);
}

template <typename T>
void AppendPod(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Every field the stable JSON holds, as length-prefixed bytes: equal exactly when the JSON is.
// Far cheaper to build than the JSON and its digest.
std::string CompactKey(const Invocation& inv) {
  std::string out;
  out.reserve(256);
  AppendField(inv.kernel_id, &out);
  AppendField(inv.platform, &out);
  AppendPod(inv.inputs.size(), &out);
  for (const auto& [name, spec] : inv.inputs) {
    AppendField(name, &out);
    AppendPod(static_cast<int>(spec.dtype), &out);
    AppendPod(spec.shape.size(), &out);
    for (int64_t d : spec.shape) AppendPod(d, &out);
  }
  AppendPod(inv.attributes.size(), &out);
  for (const auto& [name, value] : inv.attributes) {
    AppendField(name, &out);
    AppendPod(value.index(), &out);
    std::visit(
        [&out](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
            AppendField(v, &out);
          } else {
            AppendPod(v, &out);
          }
        },
        value);
  }
  const DeviceFingerprint& d = inv.device;
  AppendField(d.kind, &out);
  AppendField(d.name, &out);
  for (int64_t v : {int64_t{d.cc_major}, int64_t{d.cc_minor}, int64_t{d.sm_count}, d.memory_bytes,
                    int64_t{d.driver_version}, int64_t{d.runtime_version}}) {
    AppendPod(v, &out);
  }
  return out;
}

}  // namespace

std::string Invocation::CacheKey() const {
  // The digest of the stable JSON costs tens of microseconds; a call's key is looked up in a
  // per-thread memo first (bounded: cleared when full), keyed by the same fields in compact form.
  constexpr size_t kMemoEntries = 4096;
  thread_local absl::flat_hash_map<std::string, std::string> memo;
  std::string compact = CompactKey(*this);
  if (auto it = memo.find(compact); it != memo.end()) return it->second;
  std::string key = kernel_id + ":" + ShortSha256(StableJson());
  if (memo.size() >= kMemoEntries) memo.clear();
  memo.emplace(std::move(compact), key);
  return key;
}

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
