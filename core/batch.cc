#include "core/batch.h"

#include <thread>
#include <utility>

#include "core/status_macros.h"

namespace kernelserve {

absl::StatusOr<BatchResult> ExecuteBatch(const Executor& executor, std::string_view kernel,
                                         const std::vector<TensorMap>& items,
                                         const Attributes& attrs, const BatchOptions& options) {
  if (items.empty()) return absl::InvalidArgumentError("batch has no items");
  std::vector<int> devices = options.devices;
  if (devices.empty()) devices.push_back(options.call.device.value_or(executor.gpus().empty() ? -1 : 0));

  ExecuteOptions first_options = options.call;
  first_options.device = devices[0];
  KS_ASSIGN_OR_RETURN(ExecuteResult first, executor.Execute(kernel, items[0], attrs, first_options));

  BatchResult result;
  result.config = first.config;
  result.source = first.source;
  result.items.resize(items.size(), absl::UnknownError("not run"));
  result.items[0] = std::move(first);

  // Item i runs on devices[i % devices.size()]; one thread per device keeps each device's
  // items in order.
  auto run_device = [&](size_t d) {
    ExecuteOptions item_options = options.call;
    item_options.config = result.config;
    item_options.device = devices[d];
    for (size_t i = d == 0 ? devices.size() : d; i < items.size(); i += devices.size()) {
      absl::StatusOr<ExecuteResult> r = executor.Execute(kernel, items[i], attrs, item_options);
      if (r.ok()) r->source = result.source;  // the shared config's origin
      result.items[i] = std::move(r);
    }
  };
  if (devices.size() == 1) {
    run_device(0);
    return result;
  }
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) threads.emplace_back(run_device, d);
  for (std::thread& t : threads) t.join();
  return result;
}

}  // namespace kernelserve
