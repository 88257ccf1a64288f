// Recorder: remembers the distinct calls a process made, so that they can all be tuned ahead of
// a deployment (warming the shared config cache).
#ifndef KERNELSERVE_CORE_RECORDER_H_
#define KERNELSERVE_CORE_RECORDER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/attributes.h"
#include "core/executor.h"
#include "core/tensor.h"

namespace kernelserve {

// One distinct call: shapes, not data. A value type.
struct RecordedCall {
  std::string kernel;      // kernel name
  TensorSpecMap inputs;
  Attributes attributes;
  ExecuteOptions options;  // platform and device of the call (no override)
  std::string cache_key;
  int64_t count = 0;       // how many times it was seen
};

// Thread safety: thread-safe.
class Recorder {
 public:
  // REQUIRES: capacity > 0. Calls beyond `capacity` distinct keys are counted, not kept.
  explicit Recorder(size_t capacity = 4096) : capacity_(capacity) {}

  // Records a call (keyed by call.cache_key); a repeat only raises its count.
  void Record(RecordedCall call);
  // The distinct calls in first-seen order.
  std::vector<RecordedCall> List() const;
  size_t dropped() const;
  void Clear();

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<RecordedCall> calls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> index_ ABSL_GUARDED_BY(mu_);
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Tunes every recorded call on random data of its shapes (Executor::Autotune) and stores the
// winners. One result per call, in List() order.
std::vector<absl::StatusOr<AutotuneResult>> AutotuneAll(const Executor& executor,
                                                        const Recorder& recorder);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_RECORDER_H_
