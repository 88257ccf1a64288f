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
  return it->second->config;
}

void ConfigCache::Put(const std::string& key, const KernelConfig& config, std::string device) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->config = config;
    it->second->device = std::move(device);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  if (lru_.size() >= capacity_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front(Node{key, config, std::move(device)});
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

bool ConfigCache::EraseFor(const std::string& key, const std::string& device) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  if (!it->second->device.empty() && it->second->device != device) return false;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

std::string ConfigCache::DeviceOf(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  return it == index_.end() ? "" : it->second->device;
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
  std::vector<std::pair<std::string, KernelConfig>> entries;
  entries.reserve(lru_.size());
  for (const Node& node : lru_) entries.emplace_back(node.key, node.config);
  return entries;
}

}  // namespace kernelserve
