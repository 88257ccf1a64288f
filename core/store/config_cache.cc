#include "core/store/config_cache.h"

#include <cassert>

namespace kernelserve {

ConfigCache::ConfigCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
  assert(capacity > 0);
}

std::optional<KernelConfig> ConfigCache::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ConfigCache::Put(const std::string& key, const KernelConfig& config) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->second = config;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  if (lru_.size() >= capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, config);
  index_.emplace(key, lru_.begin());
}

bool ConfigCache::Erase(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

void ConfigCache::Clear() {
  absl::MutexLock lock(&mu_);
  lru_.clear();
  index_.clear();
}

size_t ConfigCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

std::vector<std::pair<std::string, KernelConfig>> ConfigCache::Entries() const {
  absl::MutexLock lock(&mu_);
  return std::vector<Entry>(lru_.begin(), lru_.end());
}

}  // namespace kernelserve
