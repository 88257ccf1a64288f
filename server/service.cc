#include "server/service.h"

#include <chrono>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/batch.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/pipeline.h"
#include "server/status.h"

namespace kernelserve::server {
namespace {

// True when every input carries data (else the call is tuned on synthesized inputs).
bool AllHaveData(const google::protobuf::Map<std::string, v1::Tensor>& inputs) {
  for (const auto& [name, tensor] : inputs) {
    if (tensor.data().empty()) return false;
  }
  return !inputs.empty();
}

// `asked_ms`: the request's time_budget_ms (0 = none asked).
void FillAutotune(const AutotuneResult& result, const CallPlan& plan, int64_t asked_ms,
                  v1::AutotuneResponse* response) {
  const Selection& selection = result.selection;
  response->set_time_budget_ms(BudgetMillis(plan.policy));
  if (asked_ms > 0 && absl::Milliseconds(asked_ms) > plan.policy.time_budget) {
    response->add_warnings(absl::StrCat("time_budget_ms=", asked_ms,
                                        " is more than this server's --autotune-budget; ",
                                        absl::FormatDuration(plan.policy.time_budget), " applied"));
  }
  *response->mutable_best() = ToProto(selection.config);
  response->set_config_source(ToProto(selection.source));
  response->set_cache_key(selection.cache_key);
  response->set_device_fingerprint(result.device_fingerprint);
  response->set_platform(std::string(PlatformName(result.platform)));
  response->set_device(result.device);
  for (const std::string& warning : selection.warnings) response->add_warnings(warning);
  if (!selection.tune_report.has_value()) return;
  const TuneReport& report = *selection.tune_report;
  response->set_best_us(report.best_seconds * 1e6);
  response->set_elapsed_seconds(report.elapsed_seconds);
  response->set_candidates_timed(report.candidates_run);
  response->set_candidates_total(static_cast<int32_t>(report.candidates.size()));
  response->set_budget_reached(report.budget_reached);
  for (const kernelserve::CandidateResult& c : report.candidates) {
    v1::CandidateResult* out = response->add_candidates();
    *out->mutable_config() = ToProto(c.config);
    if (c.status.ok()) out->set_median_us(c.median_seconds * 1e6);
    out->mutable_status()->set_code(c.status.raw_code());
    out->mutable_status()->set_message(std::string(c.status.message()));
  }
}

// Bytes of the inputs of `specs` that Autotune makes up (inputs the schema marks shape_only
// stay without data), saturating at INT64_MAX.
int64_t SynthesizedBytes(const KernelSchema& schema, TensorSpecMap specs) {
  std::erase_if(specs, [&schema](const auto& input) {
    const InputSchema* declared = schema.FindInput(input.first);
    return declared != nullptr && declared->shape_only;
  });
  return SpecsBytes(specs);
}

// Tuning holds the run's outputs, the tuner's copy of the first launch's outputs (compared with
// every candidate's) and a candidate's copy: three outputs' worth, saturating at INT64_MAX.
int64_t TuningOutputBytes(const CallPlan& plan) {
  const int64_t outputs = OutputBytes(plan);
  return outputs > INT64_MAX / 3 ? INT64_MAX : 3 * outputs;
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::Execute(grpc::CallbackServerContext* context,
                                                     const Raw* request, Raw* response) {
  auto* call = new ExecuteCall(deps_.budget, deps_.metrics, context, request, response,
                               /*record=*/true);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_RETURN_IF_ERROR(AdmitAndParse(deps_, deps_, *call));
    call->response().set_request_id(call->request().request_id());
    const CallRequest parsed{.request = &call->request(),
                             .buffers = &call->request_buffers(),
                             .regions = RegionRefsOf(call->request()),
                             .outputs = {}};
    KS_ASSIGN_OR_RETURN(PreparedCall prepared, Prepare(deps_, parsed, call->tracker()));
    const bool may_run_inline = MayRunInline(prepared);
    const int worker = prepared.plan.ordinal();
    return Dispatch(
        *deps_.pool, context, worker,
        [this, call, prepared = std::move(prepared)](absl::Status status, int64_t queue_us) {
          status = Run(deps_, prepared, std::move(status), {queue_us, call->recv_us()},
                       call->tracker(), &call->response(), &call->response_buffers());
          call->Finish(status);
        },
        may_run_inline);
  });
  if (!status.ok()) call->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::ExecuteBatch(grpc::CallbackServerContext* context,
                                                          const Raw* request, Raw* response) {
  auto* call = new BatchCall(deps_.budget, deps_.metrics, context, request, response,
                             /*record=*/true);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_RETURN_IF_ERROR(AdmitAndParse(deps_, deps_, *call));
    KS_ASSIGN_OR_RETURN(CallPlan plan, PlanRequest(deps_, call->request(), call->tracker()));
    v1::ExecuteBatchRequest& batch_request = call->request();
    call->response().set_request_id(batch_request.request_id());
    if (batch_request.items().empty()) {
      return absl::InvalidArgumentError("items: expected at least one item");
    }
    BatchOptions options;
    for (int device : batch_request.devices()) {
      if (!deps_.pool->Owns(device)) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices: device ", device, " is not served by this server"));
      }
      options.devices.push_back(device);
    }
    BatchItems items = TakeBatchItems(&batch_request, plan.kernel->schema());
    if (items.inputs.empty()) return items.status.front();
    // Each item's outputs from its own shapes, before any item runs.
    const int64_t outputs = BatchOutputBytes(plan, items);
    KS_RETURN_IF_ERROR(
        CheckAnswerFits(*deps_.options, outputs, "the batch's answer", batch_request.items_size()));
    KS_RETURN_IF_ERROR(call->tracker().Hold(outputs, "the items' outputs"));
    const int worker = options.devices.empty() ? plan.ordinal() : options.devices.front();
    return Dispatch(*deps_.pool, context, worker,
                    [this, call, plan = std::move(plan), options = std::move(options),
                     items = std::move(items)](absl::Status status, int64_t queue_us) {
                      RunBatch(call, plan, items, options, std::move(status), queue_us);
                    });
  });
  if (!status.ok()) call->Finish(status);
  return reactor;
}

void KernelServiceImpl::RunBatch(BatchCall* call, const CallPlan& plan, const BatchItems& items,
                                 const BatchOptions& options, absl::Status status,
                                 int64_t queue_us) const {
  absl::StatusOr<BatchResult> batch = absl::UnknownError("not run");
  if (!status.ok()) batch = status;
  if (status.ok()) {
    status = RunGuarded([&]() -> absl::Status {
      batch = kernelserve::ExecuteBatch(*deps_.executor, plan, items.inputs, options);
      return absl::OkStatus();
    });
    if (!status.ok()) batch = status;
  }
  if (batch.ok()) {
    FillBatchResponse(call->request(), items, *std::move(batch), plan, queue_us, *deps_.metrics,
                      &call->response());
  }
  // One execution of the items that ran; its phases summed over them.
  v1::Timing timing;
  timing.set_queue_us(queue_us);
  int64_t ran = 0;
  for (const v1::ExecuteResponse& item : call->response().items()) {
    if (item.status().code() != 0) continue;
    ++ran;
    timing.set_h2d_us(timing.h2d_us() + item.timing().h2d_us());
    timing.set_d2h_us(timing.d2h_us() + item.timing().d2h_us());
    timing.set_total_us(timing.total_us() + item.timing().total_us());
  }
  RecordInference(deps_.stats, plan.kernel->name(), call->tracker().Outcome(batch.status()), timing,
                  call->tracker().seconds(), ran);
  call->Finish(batch.status());
}

grpc::ServerUnaryReactor* KernelServiceImpl::Autotune(grpc::CallbackServerContext* context,
                                                      const Raw* request, Raw* response) {
  auto* call = new AutotuneCall(deps_.budget, deps_.metrics, context, request, response,
                                /*record=*/true);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  StartAutotune(call);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KernelServiceImpl::AutotuneStream(
    grpc::CallbackServerContext* context, const Raw* request) {
  auto* call = new AutotuneStreamCall(deps_.budget, deps_.metrics, context, request);
  StartAutotune(call);  // the reactor lives until gRPC is done with it (OnDone)
  return call;
}

template <typename Call>
void KernelServiceImpl::StartAutotune(Call* call) {
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_RETURN_IF_ERROR(AdmitAndParse(deps_, deps_, *call));
    KS_ASSIGN_OR_RETURN(CallPlan plan, PlanRequest(deps_, call->request(), call->tracker()));
    if constexpr (std::is_same_v<Call, AutotuneStreamCall>) {
      // The call outlives its run: it is finished (and deleted) after the tuning returns.
      plan.tune_progress = [call](const TuneProgress& progress) { call->Progress(progress); };
    }
    std::optional<TensorMap> inputs;
    if (AllHaveData(call->request().inputs())) {
      KS_ASSIGN_OR_RETURN(inputs, TakeTensors(call->request().mutable_inputs()));
    } else {
      // Inputs made up from shapes count like received ones, under a limit of their own.
      const int64_t synthesized = SynthesizedBytes(plan.kernel->schema(), plan.invocation.inputs);
      if (synthesized > deps_.options->max_synthetic_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("inputs given by shape only: ", synthesized,
                         " bytes to synthesize would pass --max-synthetic-bytes=",
                         deps_.options->max_synthetic_bytes, "; send the data, or smaller shapes"));
      }
      KS_RETURN_IF_ERROR(call->tracker().Hold(synthesized, "synthesized inputs"));
    }
    KS_RETURN_IF_ERROR(
        call->tracker().Hold(TuningOutputBytes(plan), "outputs and the tuner's copies of them"));
    const int worker = plan.ordinal();
    return Dispatch(*deps_.pool, call->tracker().context(), worker,
                    [this, call, plan = std::move(plan), inputs = std::move(inputs)](
                        absl::Status status, int64_t /*queue_us*/) {
                      RunAutotune(call, plan, inputs ? &*inputs : nullptr, std::move(status));
                    });
  });
  if (!status.ok()) call->Finish(status);
}

template <typename Call>
void KernelServiceImpl::RunAutotune(Call* call, const CallPlan& plan, const TensorMap* inputs,
                                    absl::Status status) const {
  absl::StatusOr<AutotuneResult> result = absl::UnknownError("not run");
  if (!status.ok()) result = status;
  if (status.ok()) {
    status = RunGuarded([&]() -> absl::Status {
      result = deps_.executor->Tune(plan, inputs);
      return absl::OkStatus();
    });
    if (!status.ok()) result = status;
  }
  // Recorded with the code the client sees (a tuning past the deadline is not OK).
  const absl::Status outcome = call->tracker().Outcome(result.status());
  const bool all_failed = result.ok() && result->selection.tune_report.has_value() &&
                          result->selection.tune_report->all_failed;
  deps_.metrics->AutotuneRun(plan.kernel->name(),
                             !outcome.ok() ? "error" : (all_failed ? "all_failed" : "ok"),
                             call->tracker().seconds());
  if (outcome.ok()) {
    FillAutotune(*result, plan, call->request().time_budget_ms(), &call->response());
  }
  call->Finish(outcome);
}

}  // namespace kernelserve::server
