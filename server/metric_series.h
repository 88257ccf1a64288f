// SeriesCache: the series of one Prometheus family, found by their label values without
// building a label map on every call.
#ifndef KERNELSERVE_SERVER_METRIC_SERIES_H_
#define KERNELSERVE_SERVER_METRIC_SERIES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/family.h"

namespace kernelserve::server {

// The series of `family` whose labels are kLabels names, by their values. The first call with a
// combination of values adds the series to the family (Family::Add: a label map built, hashed and
// looked up under the family's lock, most of a metric update's cost); later calls find it by the
// values joined into one key. Series are never removed from the family, so the pointers stay
// valid for the family's life.
//
// Thread safety: thread-safe; lookups of known series take a shared lock.
template <typename T, size_t kLabels>
class SeriesCache {
 public:
  // `family` must outlive this; `names`: the label names, in the order Get takes the values.
  SeriesCache(prometheus::Family<T>& family, std::array<std::string, kLabels> names)
      : family_(family), names_(std::move(names)) {}

  SeriesCache(const SeriesCache&) = delete;
  SeriesCache& operator=(const SeriesCache&) = delete;

  // The series with these label values; `args` (a histogram's buckets) go to Family::Add when it
  // is new.
  template <typename... Args>
  T& Get(const std::array<std::string_view, kLabels>& values, Args&&... args) {
    // Each value after its length, so that no two combinations share a key whatever bytes the
    // values hold.
    std::string key;
    size_t size = kLabels * sizeof(uint32_t);
    for (std::string_view v : values) size += v.size();
    key.reserve(size);
    for (std::string_view v : values) {
      const auto length = static_cast<uint32_t>(v.size());
      key.append(reinterpret_cast<const char*>(&length), sizeof(length));
      key.append(v);
    }
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = series_.find(key);
      if (it != series_.end()) return *it->second;
    }
    std::map<std::string, std::string> labels;
    for (size_t i = 0; i < kLabels; ++i) labels.emplace(names_[i], std::string(values[i]));
    absl::MutexLock lock(&mu_);
    T*& found = series_[key];
    if (found == nullptr) found = &family_.Add(labels, std::forward<Args>(args)...);
    return *found;
  }

 private:
  prometheus::Family<T>& family_;
  const std::array<std::string, kLabels> names_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, T*> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_METRIC_SERIES_H_
