// ConfigTiers: the persistent store, the in-memory cache and the selector chain over them, built
// together from a store spec. The server and the executor demo both start from this.
//
//   KS_ASSIGN_OR_RETURN(ConfigTiers tiers, OpenConfigTiers("redis://127.0.0.1:6379/0"));
//   Executor executor(&registry, tiers.chain.get(), DetectGpus());
#ifndef KERNELSERVE_CORE_CONFIG_TIERS_H_
#define KERNELSERVE_CORE_CONFIG_TIERS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "core/store/persistent_store.h"

namespace kernelserve {

// Owns the tiers. Movable; the chain keeps pointing at the same cache and store after a move.
struct ConfigTiers {
  std::unique_ptr<PersistentStore> store;      // null for "memory": no persistent tier
  std::unique_ptr<ConfigCache> memory;         // never null after OpenConfigTiers
  std::unique_ptr<ConfigSelectorChain> chain;  // never null; borrows memory and store

  // The store's location, or "memory (none)" when there is no persistent tier.
  std::string StoreLocation() const;
};

// Opens the store named by `store_spec` (see OpenStore: memory, file, file:PATH, redis://...),
// then a ConfigCache and a ConfigSelectorChain with `options` over both. InvalidArgument for a
// bad spec; the file store's errors for an unreadable file. A Redis store opens while Redis is
// down (the chain counts its errors through options.on_store_error).
absl::StatusOr<ConfigTiers> OpenConfigTiers(std::string_view store_spec, ChainOptions options = {});

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_CONFIG_TIERS_H_
