// ConfigCache: the in-memory tier of the selector chain.
#ifndef KERNELSERVE_CORE_STORE_CONFIG_CACHE_H_
#define KERNELSERVE_CORE_STORE_CONFIG_CACHE_H_

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/kernel_config.h"

namespace kernelserve {

// A bounded map from cache key to config with least-recently-used eviction.
// Thread safety: thread-safe.
class ConfigCache {
 public:
  // REQUIRES: capacity > 0.
  explicit ConfigCache(size_t capacity = 65536);

  // The config for `key`, marking it most recently used; nullopt on a miss.
  std::optional<KernelConfig> Get(const std::string& key);
  // Inserts or replaces; evicts the least recently used entry when full.
  void Put(const std::string& key, const KernelConfig& config);
  // True when an entry was removed.
  bool Erase(const std::string& key);
  void Clear();
  size_t size() const;
  size_t capacity() const { return capacity_; }
  // A snapshot, most recently used first.
  std::vector<std::pair<std::string, KernelConfig>> Entries() const;

 private:
  using Entry = std::pair<std::string, KernelConfig>;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_CONFIG_CACHE_H_
