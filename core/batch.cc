#include "core/batch.h"

#include <thread>
#include <utility>

#include "core/status_macros.h"

namespace kernelserve {

namespace {

// The plan of `items` on `device`, with `config` as the override. The first item's plan is
// moved; the others are planned anew (their own analysis) from its kernel and params.
absl::StatusOr<CallPlan> PlanItem(const Executor& executor, const CallPlan& first,
                                  const TensorMap& item, int device, const KernelConfig& config) {
  ExecuteOptions options;
  options.platform = first.device->ordinal == device ? first.invocation.platform : "";
  options.device = device;
  options.config = config;
  options.interrupt = first.interrupt;
  KS_ASSIGN_OR_RETURN(CallPlan plan, executor.Plan(first.kernel->name(), SpecsOf(item),
                                                   first.attributes(), options));
  plan.policy = first.policy;
  return plan;
}

}  // namespace

absl::StatusOr<BatchResult> ExecuteBatch(const Executor& executor, const CallPlan& first,
                                         const std::vector<TensorMap>& items,
                                         const BatchOptions& options) {
  if (items.empty()) return absl::InvalidArgumentError("batch has no items");
  std::vector<int> devices = options.devices;
  if (devices.empty()) devices.push_back(first.ordinal());

  absl::StatusOr<CallPlan> head = first.ordinal() == devices[0]
                                      ? absl::StatusOr<CallPlan>(first)
                                      : executor.Retarget(first, devices[0]);
  if (!head.ok()) return head.status();
  KS_ASSIGN_OR_RETURN(ExecuteResult result0, executor.Run(*head, items[0]));

  BatchResult result;
  result.config = result0.config;
  result.source = result0.source;
  result.items.resize(items.size(), absl::UnknownError("not run"));
  result.items[0] = std::move(result0);

  // Item i runs on devices[i % devices.size()]; one thread per device keeps each device's
  // items in order.
  auto run_device = [&](size_t d) {
    for (size_t i = d == 0 ? devices.size() : d; i < items.size(); i += devices.size()) {
      absl::StatusOr<CallPlan> plan =
          PlanItem(executor, first, items[i], devices[d], result.config);
      absl::StatusOr<ExecuteResult> r =
          plan.ok() ? executor.Run(*plan, items[i]) : absl::StatusOr<ExecuteResult>(plan.status());
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
