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

// A bounded map from cache key to config with least-recently-used eviction. Each entry may
// name the device it is for (its fingerprint hash), so that a delete for another device
// leaves it alone.
// Thread safety: thread-safe.
class ConfigCache {
 public:
  // REQUIRES: capacity > 0.
  explicit ConfigCache(size_t capacity = 65536);

  // The config for `key`, marking it most recently used; nullopt on a miss.
  std::optional<KernelConfig> Get(const std::string& key);
  // Inserts or replaces; evicts the least recently used entry when full. `device`: the
  // fingerprint hash of the device the config is for ("" = not known).
  void Put(const std::string& key, const KernelConfig& config, std::string device = "");
  // True when an entry was removed.
  bool Erase(const std::string& key);
  // Erase, only when the entry is for `device` (or names no device).
  bool EraseFor(const std::string& key, const std::string& device);
  // The device the entry of `key` is for; "" when it names none or there is no entry.
  std::string DeviceOf(const std::string& key) const;
  void Clear();
  size_t size() const;
  size_t capacity() const { return capacity_; }
  // A snapshot, most recently used first.
  std::vector<std::pair<std::string, KernelConfig>> Entries() const;

 private:
  struct Node {
    std::string key;
    KernelConfig config;
    std::string device;
  };
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::list<Node> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  std::unordered_map<std::string, std::list<Node>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_CONFIG_CACHE_H_
