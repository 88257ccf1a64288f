#include "core/config_tiers.h"

#include <utility>

#include "core/status_macros.h"
#include "core/store/store_factory.h"

namespace kernelserve {

std::string ConfigTiers::StoreLocation() const {
  return store != nullptr ? store->location() : "memory (none)";
}

absl::StatusOr<ConfigTiers> OpenConfigTiers(std::string_view store_spec, ChainOptions options) {
  ConfigTiers tiers;
  KS_ASSIGN_OR_RETURN(tiers.store, OpenStore(store_spec));
  tiers.memory = std::make_unique<ConfigCache>();
  tiers.chain = std::make_unique<ConfigSelectorChain>(tiers.memory.get(), tiers.store.get(),
                                                      std::move(options));
  return tiers;
}

}  // namespace kernelserve
