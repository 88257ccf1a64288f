#include "server/batch_call.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/convert.h"
#include "server/call.h"
#include "server/status.h"

namespace kernelserve::server {

BatchItems TakeBatchItems(v1::ExecuteBatchRequest* request, const KernelSchema& schema) {
  BatchItems items;
  items.status.resize(static_cast<size_t>(request->items_size()));
  for (int i = 0; i < request->items_size(); ++i) {
    absl::StatusOr<TensorMap> inputs =
        TakeTensors(request->mutable_items(i)->mutable_inputs(), nullptr, &schema);
    if (!inputs.ok()) {
      items.status[static_cast<size_t>(i)] =
          absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", inputs.status().message()));
      continue;
    }
    items.bytes += TensorBytes(*inputs);
    items.inputs.push_back(*std::move(inputs));
    items.index.push_back(static_cast<size_t>(i));
  }
  return items;
}

int64_t BatchOutputBytes(const CallPlan& plan, const BatchItems& items) {
  int64_t total = 0;
  for (const TensorMap& inputs : items.inputs) {
    absl::StatusOr<std::shared_ptr<const Problem>> problem =
        plan.kernel->Analyze(SpecsOf(inputs), plan.attributes());
    if (!problem.ok()) continue;
    const int64_t bytes = SpecsBytes(plan.kernel->OutputSpecs(**problem));
    if (__builtin_add_overflow(total, bytes, &total)) return INT64_MAX;
  }
  return total;
}

void FillBatchResponse(const v1::ExecuteBatchRequest& request, const BatchItems& items,
                       BatchResult batch, const CallPlan& plan, int64_t queue_us, Metrics& metrics,
                       v1::ExecuteBatchResponse* response) {
  const std::string& kernel = plan.kernel->name();
  *response->mutable_config() = ToProto(batch.config);
  response->set_config_source(ToProto(batch.source));
  RecordSelection(metrics, kernel, batch.source, 0.0);
  for (size_t i = 0; i < items.status.size(); ++i) {
    v1::ExecuteResponse* item = response->add_items();
    item->set_request_id(request.items(static_cast<int>(i)).request_id());
    if (!items.status[i].ok()) ToRpcStatus(items.status[i], item->mutable_status());
  }
  for (size_t j = 0; j < items.index.size(); ++j) {
    v1::ExecuteResponse* item = response->mutable_items(static_cast<int>(items.index[j]));
    absl::StatusOr<ExecuteResult>& result = batch.items[j];
    if (!result.ok()) {
      ToRpcStatus(result.status(), item->mutable_status());
      continue;
    }
    metrics.KernelRun(kernel, PlatformName(result->platform), DeviceLabel(result->device),
                      static_cast<double>(result->timings.kernel_us) * 1e-6);
    FillResponse(*std::move(result), item);
  }
  for (v1::ExecuteResponse& item : *response->mutable_items()) {
    item.mutable_timing()->set_queue_us(queue_us);
  }
}

}  // namespace kernelserve::server
