#include "core/recorder.h"

#include <utility>

namespace kernelserve {

void Recorder::Record(RecordedCall call) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(call.cache_key);
  if (it != index_.end()) {
    ++calls_[it->second].count;
    return;
  }
  if (calls_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  call.count = 1;
  call.options.config.reset();
  index_.emplace(call.cache_key, calls_.size());
  calls_.push_back(std::move(call));
}

std::vector<RecordedCall> Recorder::List() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

size_t Recorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void Recorder::Clear() {
  absl::MutexLock lock(&mu_);
  calls_.clear();
  index_.clear();
  dropped_ = 0;
}

std::vector<absl::StatusOr<AutotuneResult>> AutotuneAll(const Executor& executor,
                                                        const Recorder& recorder) {
  std::vector<absl::StatusOr<AutotuneResult>> results;
  for (const RecordedCall& call : recorder.List()) {
    results.push_back(executor.Autotune(call.kernel, call.inputs, call.attributes, call.options));
  }
  return results;
}

}  // namespace kernelserve
