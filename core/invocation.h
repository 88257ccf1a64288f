// Invocation: what a call is, without its data; and its cache key.
#ifndef KERNELSERVE_CORE_INVOCATION_H_
#define KERNELSERVE_CORE_INVOCATION_H_

#include <string>

#include "core/attributes.h"
#include "core/device.h"
#include "core/tensor.h"

namespace kernelserve {

// A value type.
struct Invocation {
  std::string kernel_id;  // "mean_pooling@v1"
  TensorSpecMap inputs;   // by input name
  Attributes attributes;
  std::string platform;   // resolved platform name ("cpu", "cuda", ...)
  DeviceFingerprint device;

  // The JSON the key hashes: {"attributes":{..},"device":{..},"inputs":{..},"kernel":..,
  // "platform":..} with every object's keys sorted.
  std::string StableJson() const;
  // kernel_id + ":" + first 16 hex digits of SHA-256 of StableJson().
  std::string CacheKey() const;
};

// First 16 hex digits of SHA-256 of `text`.
std::string ShortSha256(std::string_view text);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_INVOCATION_H_
