// The pieces under the call pipeline's Plan, Reserve and Run steps (server/pipeline.h): the
// request's fields converted, the executor's plan with the worker chosen, the answer's size, the
// executor's run, and the response. Also used by ExecuteBatch, Autotune and PutConfig.
#ifndef KERNELSERVE_SERVER_CALL_H_
#define KERNELSERVE_SERVER_CALL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/executor.h"
#include "core/status_macros.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/convert.h"
#include "server/metrics.h"
#include "server/model_stats.h"
#include "server/options.h"
#include "server/region_tensors.h"
#include "server/service_deps.h"
#include "server/worker_pool.h"

namespace kernelserve::server {

// The call-describing fields of a request, converted. A value type.
struct CallParams {
  std::string kernel;
  Attributes params;  // typed params and `parameters` (ParamsFromProto)
  std::string platform;
  std::optional<int> device;
  PolicyPatch policy;
  TensorSpecMap specs;  // input shapes (a batch's: its first item's)
};

// The tuning budget a request's time_budget_ms asks for: none for 0 (the server's applies),
// InvalidArgument naming the field when negative.
absl::StatusOr<std::optional<absl::Duration>> TimeBudgetOf(int64_t time_budget_ms);
// The other way: a policy's budget in milliseconds for a response, 0 for none.
int64_t BudgetMillis(const AutotunePolicy& policy);

// The CallParams of ExecuteRequest, ExecuteBatchRequest, AutotuneRequest, PutConfigRequest.
// InvalidArgument for bad params or input specs, naming them, a config setting a retired field
// (CheckConfigProto), or a negative time_budget_ms.
template <typename Request>
absl::StatusOr<CallParams> ParamsOf(const Request& request) {
  CallParams params;
  params.kernel = request.kernel();
  if constexpr (requires { request.params_case(); }) {
    // The common call names params by the map alone: read as the map, not by reflection.
    if (request.params_case() == Request::PARAMS_NOT_SET) {
      KS_ASSIGN_OR_RETURN(params.params, ParamsFromProto(request.parameters()));
    } else {
      KS_ASSIGN_OR_RETURN(params.params, ParamsFromProto(request));
    }
  } else {
    KS_ASSIGN_OR_RETURN(params.params, ParamsFromProto(request));
  }
  params.platform = request.platform();
  if constexpr (requires { request.config(); }) {
    KS_RETURN_IF_ERROR(CheckConfigProto(request.config()));  // a retired field (backend) set
  }
  if constexpr (requires { request.has_device(); }) {
    if (request.has_device()) params.device = request.device();
  }
  if constexpr (requires { request.policy(); }) params.policy = FromProto(request.policy());
  if constexpr (requires { request.time_budget_ms(); }) {
    KS_ASSIGN_OR_RETURN(params.policy.time_budget, TimeBudgetOf(request.time_budget_ms()));
  }
  if constexpr (requires { request.inputs(); }) {
    KS_ASSIGN_OR_RETURN(params.specs, SpecsFromProto(request.inputs()));
  }
  if constexpr (requires { request.items(); }) {
    // A batch is planned (and its config chosen) by its first item.
    if (!request.items().empty()) {
      KS_ASSIGN_OR_RETURN(params.specs, SpecsFromProto(request.items(0).inputs()));
    }
  }
  return params;
}

// Plans the call through the executor, with `options` (override, interrupt) completed from
// `params`: on the requested device, or on the least loaded GPU the pool serves (ties round
// robin). InvalidArgument for bad inputs or params, or a device this server does not serve;
// Unimplemented for a platform the kernel lacks or that cannot run the inputs.
absl::StatusOr<CallPlan> PlanCall(const Executor& executor, const WorkerPool& pool,
                                  const CallParams& params, ExecuteOptions options = {});

// "cpu" for -1, else "cuda:N".
std::string DeviceLabel(int device);
// Bytes of the tensors' data.
int64_t TensorBytes(const TensorMap& tensors);
// Bytes of the outputs of the planned call, saturating at INT64_MAX.
int64_t OutputBytes(const CallPlan& plan);
// Bytes of the outputs of the planned call that its answer carries: all of them but those
// written into `spans` (nullable; answered with dtype and shape alone) and, when `asked` is not
// empty, those it does not name. Saturating at INT64_MAX.
int64_t AnsweredOutputBytes(const CallPlan& plan, const OutputSpans* spans,
                            const std::vector<std::string>& asked = {});

// What an answer holds besides its outputs' bytes (config, cache key, device, timings,
// warnings, the outputs' names and shapes), at most: CheckAnswerFits leaves this much room for
// them per answer.
inline constexpr int64_t kAnswerFieldsBytes = int64_t{4} << 10;

// OK when a message of `answers` answers carrying `output_bytes` of outputs in all (and
// kAnswerFieldsBytes of other fields each) fits options.max_message_bytes. ResourceExhausted
// naming both sizes and --max-message-bytes otherwise: such an answer could not be sent, so the
// call is refused before it runs. `what` names the message ("the answer").
absl::Status CheckAnswerFits(const ServerOptions& options, int64_t output_bytes,
                             std::string_view what, int64_t answers = 1);

// Moves `result` into `response` (outputs, config, source, device, timings but queue_us and
// recv_us). Outputs that a HostBuffer holds stay there, listed in `buffers`, when it is
// non-null (for wire::SerializeResponse); else they are copied into the response. Outputs of
// `spans` (nullable; each with room, see OutputSpansOf) are copied into their regions and
// answered with dtype and shape alone.
void FillResponse(ExecuteResult result, v1::ExecuteResponse* response,
                  wire::TensorBuffers* buffers = nullptr, const OutputSpans* spans = nullptr);

// Runs `plan` on `inputs` through the executor (on the calling worker thread), fills
// `response` (and `buffers` and `spans`, as FillResponse) and records the kernel, selection and
// tuning metrics (deps.executor, deps.metrics). `regions` (nullable): the shared-memory regions of
// the call's tensors; DataLoss (CallRegions::CheckIntact) when one was damaged before the call
// was done with it.
absl::Status RunCall(const CallDeps& deps, const CallPlan& plan, const TensorMap& inputs,
                     v1::ExecuteResponse* response, wire::TensorBuffers* buffers = nullptr,
                     const OutputSpans* spans = nullptr, const CallRegions* regions = nullptr);

// Counts a kernel call that reached its worker in `stats` (nullable: not kept): see
// ModelStats::Record.
void RecordInference(ModelStats* stats, const std::string& kernel, const absl::Status& status,
                     const v1::Timing& timing, double seconds, int64_t inferences = 1);

// Records a tuning outcome from a selection that tuned (or not).
void RecordSelection(Metrics& metrics, const std::string& kernel, ConfigSource source,
                     double select_seconds);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_CALL_H_
