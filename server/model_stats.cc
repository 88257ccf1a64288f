#include "server/model_stats.h"

#include <algorithm>
#include <chrono>

namespace kernelserve::server {
namespace {

void Add(inference::StatisticDuration* duration, int64_t ns) {
  duration->set_count(duration->count() + 1);
  duration->set_ns(duration->ns() + static_cast<uint64_t>(std::max<int64_t>(ns, 0)));
}

constexpr int64_t kNsPerUs = 1000;

}  // namespace

void ModelStats::Record(const std::string& kernel, const absl::Status& status,
                        const v1::Timing& timing, double seconds, int64_t inferences) {
  const auto ns = static_cast<int64_t>(seconds * 1e9);
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  absl::MutexLock lock(&mu_);
  inference::ModelStatistics& stats = stats_[kernel];
  inference::InferStatistics* infer = stats.mutable_inference_stats();
  if (!status.ok()) {
    Add(infer->mutable_fail(), ns);
    return;
  }
  stats.set_last_inference(static_cast<uint64_t>(now_ms));
  stats.set_inference_count(stats.inference_count() + static_cast<uint64_t>(inferences));
  stats.set_execution_count(stats.execution_count() + 1);
  Add(infer->mutable_success(), ns);
  Add(infer->mutable_queue(), timing.queue_us() * kNsPerUs);
  Add(infer->mutable_compute_input(), timing.h2d_us() * kNsPerUs);
  Add(infer->mutable_compute_infer(),
      (timing.total_us() - timing.h2d_us() - timing.d2h_us()) * kNsPerUs);
  Add(infer->mutable_compute_output(), timing.d2h_us() * kNsPerUs);
}

inference::ModelStatistics ModelStats::Get(const std::string& kernel) const {
  inference::ModelStatistics stats;
  {
    absl::MutexLock lock(&mu_);
    auto it = stats_.find(kernel);
    if (it != stats_.end()) stats = it->second;
  }
  stats.set_name(kernel);
  stats.set_version("1");
  return stats;
}

}  // namespace kernelserve::server
