// Batch execution with one shared config: the counterparts of vmap_with_config (many calls of
// one kernel on one device) and pmap_with_config (the same spread over several devices).
#ifndef KERNELSERVE_CORE_BATCH_H_
#define KERNELSERVE_CORE_BATCH_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/executor.h"

namespace kernelserve {

// Options of a batch. Every field has a default.
struct BatchOptions {
  std::vector<int> devices;  // devices to spread items over (-1 = CPU); empty = the plan's
};

// A value type.
struct BatchResult {
  KernelConfig config;                               // the one config every item ran with
  ConfigSource source = ConfigSource::kHeuristic;    // where the first item's config came from
  std::vector<absl::StatusOr<ExecuteResult>> items;  // in input order
};

// Runs `items` (input maps of one kernel, normally of equal shapes) with one config. `first` is
// the plan of items[0]; the config is selected for it, and every other item is planned with
// the same kernel, params and options and runs with that config as an explicit override, so a
// bad item fails alone (its own status) and never changes the others' config. With several
// devices, items go round robin over them, one thread per device.
// Errors: the first item's failure (no config could be chosen), or InvalidArgument for an
// empty batch.
absl::StatusOr<BatchResult> ExecuteBatch(const Executor& executor, const CallPlan& first,
                                         const std::vector<TensorMap>& items,
                                         const BatchOptions& options);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_BATCH_H_
