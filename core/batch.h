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
  ExecuteOptions call;       // applied to every item (platform, override, policy)
  std::vector<int> devices;  // devices to spread items over (-1 = CPU); empty = call.device
};

// A value type.
struct BatchResult {
  KernelConfig config;                                 // the one config every item ran with
  ConfigSource source = ConfigSource::kHeuristic;      // where the first item's config came from
  std::vector<absl::StatusOr<ExecuteResult>> items;    // in input order
};

// Runs `items` (input maps of one kernel, normally of equal shapes). The config is selected
// for the first item; every other item runs with it as an explicit override, so a bad item
// fails alone (its own status) and never changes the others' config. With several devices,
// items go round robin over them, one thread per device.
// Errors: the first item's failure (no config could be chosen), or InvalidArgument for an
// empty batch.
absl::StatusOr<BatchResult> ExecuteBatch(const Executor& executor, std::string_view kernel,
                                         const std::vector<TensorMap>& items,
                                         const Attributes& attrs, const BatchOptions& options);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_BATCH_H_
