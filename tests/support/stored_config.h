// A sample StoredConfig for the store tests (FileStore, RedisStore, StoredConfig JSON).
#ifndef KERNELSERVE_TESTS_SUPPORT_STORED_CONFIG_H_
#define KERNELSERVE_TESTS_SUPPORT_STORED_CONFIG_H_

#include <random>
#include <string>

#include "core/store/persistent_store.h"

namespace kernelserve::testing {

// A StoredConfig of `kernel_id` for the device `fingerprint_hash`. Every other field is drawn
// from `rng`: each config field, a fresh cache key ("<kernel_id>:<16 hex>"), the measured time,
// the origin (autotune, pinned or heuristic), the host and the time stored.
StoredConfig SampleStoredConfig(std::mt19937& rng, const std::string& kernel_id,
                                const std::string& fingerprint_hash);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_STORED_CONFIG_H_
