// ModelStats: per-kernel inference statistics in the Open Inference Protocol's terms
// (ModelStatistics), kept for the kernel calls of every protocol.
#ifndef KERNELSERVE_SERVER_MODEL_STATS_H_
#define KERNELSERVE_SERVER_MODEL_STATS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.pb.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::server {

// Thread safety: thread-safe.
class ModelStats {
 public:
  // One kernel call that reached a device worker: `status` its outcome (a call dropped from the
  // queue counts as failed), `timing` its phases (queue_us included), `seconds` from arrival to
  // answer, `inferences` the items it ran (an ExecuteBatch's that succeeded; 1 otherwise).
  // Successes add `inferences` to the inference count, one to the execution count, and to
  // success, queue, compute_input (h2d), compute_infer (the run but its copies) and
  // compute_output (d2h); failures to fail.
  void Record(const std::string& kernel, const absl::Status& status, const v1::Timing& timing,
              double seconds, int64_t inferences = 1);
  // The statistics of `kernel`, version "1" (zeros for one never called).
  inference::ModelStatistics Get(const std::string& kernel) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, inference::ModelStatistics> stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_MODEL_STATS_H_
