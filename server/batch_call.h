// The parts of ExecuteBatch that the handler and its worker share: the request's items with
// their tensors moved out, and the filling of the response.
#ifndef KERNELSERVE_SERVER_BATCH_CALL_H_
#define KERNELSERVE_SERVER_BATCH_CALL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/batch.h"
#include "core/executor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "server/metrics.h"

namespace kernelserve::server {

// The items of a batch request with their tensors moved out. An item whose tensors do not
// convert keeps its error and does not run; the others run as one batch. A value type.
struct BatchItems {
  std::vector<TensorMap> inputs;     // the items that run
  std::vector<size_t> index;         // inputs[j] is request item index[j]
  std::vector<absl::Status> status;  // per request item: OK, or why it does not run
  int64_t bytes = 0;                 // tensor bytes of `inputs`
};

// Moves the items' tensors out of `request`; inputs `schema` marks shape_only may come without
// data.
BatchItems TakeBatchItems(v1::ExecuteBatchRequest* request, const KernelSchema& schema);

// Bytes of the outputs of the items that run, each item's from its own shapes (the kernel's
// analysis of the item with the params of `plan`, the batch's), before any of them runs. An
// item that the analysis refuses produces none (it fails alone when the batch runs).
// Saturating at INT64_MAX.
int64_t BatchOutputBytes(const CallPlan& plan, const BatchItems& items);

// Fills `response` from `batch`: the shared config and source, then one item per request item
// in request order, each with its request_id, queue_us and either its outputs or its in-band
// error. Records the selection and the kernel time of every item that ran.
void FillBatchResponse(const v1::ExecuteBatchRequest& request, const BatchItems& items,
                       BatchResult batch, const CallPlan& plan, int64_t queue_us, Metrics& metrics,
                       v1::ExecuteBatchResponse* response);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_BATCH_CALL_H_
