#include "server/service.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/status.h"

namespace kernelserve::server {
namespace {

constexpr std::string_view kUnknown = "unknown";
// An Execute with at most this many input bytes runs on the gRPC thread when the CPU worker is
// idle: the hand-off to the worker thread was a tenth of a tiny call's latency.
constexpr int64_t kInlineRunBytes = 64 << 10;

// The kernel's name for metric labels; "unknown" for names the registry does not know (so
// arbitrary client text never becomes a label).
std::string KernelLabel(const Executor& executor, const std::string& name) {
  absl::StatusOr<const Kernel*> kernel = executor.registry().Find(name);
  return kernel.ok() ? (*kernel)->name() : std::string(kUnknown);
}

void Sha256(std::string_view text, unsigned char* digest) {
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
}

// True when every input carries data (else the call is tuned on synthesized inputs).
bool AllHaveData(const google::protobuf::Map<std::string, v1::Tensor>& inputs) {
  for (const auto& [name, tensor] : inputs) {
    if (tensor.data().empty()) return false;
  }
  return !inputs.empty();
}

void FillAutotune(const AutotuneResult& result, v1::AutotuneResponse* response) {
  const Selection& selection = result.selection;
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
  for (const kernelserve::CandidateResult& c : report.candidates) {
    v1::CandidateResult* out = response->add_candidates();
    *out->mutable_config() = ToProto(c.config);
    if (c.status.ok()) out->set_median_us(c.median_seconds * 1e6);
    out->mutable_status()->set_code(c.status.raw_code());
    out->mutable_status()->set_message(std::string(c.status.message()));
  }
}

// Bytes of synthesized data for `specs`, saturating at INT64_MAX.
int64_t SpecBytes(const TensorSpecMap& specs) {
  int64_t total = 0;
  for (const auto& [name, spec] : specs) {
    const int64_t bytes = NumElements(spec.shape).value_or(INT64_MAX / 8) *
                          static_cast<int64_t>(ItemSize(spec.dtype));
    if (__builtin_add_overflow(total, bytes, &total)) return INT64_MAX;
  }
  return total;
}


// The items of a batch request with their tensors moved out. An item whose tensors do not
// convert keeps its error and does not run; the others run as one batch.
struct BatchItems {
  std::vector<TensorMap> inputs;     // the items that run
  std::vector<size_t> index;         // inputs[j] is request item index[j]
  std::vector<absl::Status> status;  // per request item: OK, or why it does not run
  int64_t bytes = 0;                 // tensor bytes of `inputs`
};

BatchItems TakeBatchItems(v1::ExecuteBatchRequest* request) {
  BatchItems items;
  items.status.resize(static_cast<size_t>(request->items_size()));
  for (int i = 0; i < request->items_size(); ++i) {
    absl::StatusOr<TensorMap> inputs = TakeTensors(request->mutable_items(i)->mutable_inputs());
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

// Fills `response` from `batch`: the shared config and source, then one item per request item
// in request order, each with its request_id, queue_us and either its outputs or its in-band
// error. Records the selection and the kernel time of every item that ran.
void FillBatchResponse(const v1::ExecuteBatchRequest& request, const BatchItems& items,
                       BatchResult batch, const PlannedCall& call, int64_t queue_us,
                       Metrics& metrics, v1::ExecuteBatchResponse* response) {
  const std::string& kernel = call.kernel->name();
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
    metrics.KernelRun(kernel, call.platform, DeviceLabel(result->device),
                      static_cast<double>(result->timings.kernel_us) * 1e-6);
    FillResponse(*std::move(result), item);
  }
  for (v1::ExecuteResponse& item : *response->mutable_items()) {
    item.mutable_timing()->set_queue_us(queue_us);
  }
}

}  // namespace

absl::Status KernelServiceImpl::Authorize(const grpc::CallbackServerContext& context) const {
  if (deps_.auth_token.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  // Comparing digests keeps the time independent of where (and whether) the texts differ.
  unsigned char got[SHA256_DIGEST_LENGTH];
  unsigned char want[SHA256_DIGEST_LENGTH];
  Sha256(std::string_view(it->second.data(), it->second.size()), got);
  Sha256(absl::StrCat("Bearer ", deps_.auth_token), want);
  if (CRYPTO_memcmp(got, want, SHA256_DIGEST_LENGTH) != 0) {
    return absl::UnauthenticatedError("the bearer token does not match");
  }
  return absl::OkStatus();
}

absl::Status KernelServiceImpl::Dispatch(
    grpc::CallbackServerContext* context, int worker,
    std::function<void(absl::Status status, int64_t queue_us)> run, bool may_run_inline) const {
  WorkItem item;
  item.deadline = context->deadline();
  item.cancelled = [context] { return context->IsCancelled(); };
  item.may_run_inline = may_run_inline;
  item.run = std::move(run);
  return deps_.pool->Submit(worker, std::move(item));
}

absl::StatusOr<PlannedCall> KernelServiceImpl::PlanRequest(const CallParams& params,
                                                           const v1::KernelConfig* config,
                                                           CallTracker& tracker) const {
  tracker.kernel = KernelLabel(*deps_.executor, params.kernel);
  KS_ASSIGN_OR_RETURN(PlannedCall call, PlanCall(*deps_.executor, *deps_.pool, params));
  tracker.platform = call.platform;
  if (config != nullptr && IsSet(*config)) call.options.config = FromProto(*config);
  // Stops the call's work once its client is gone; `tracker` outlives the run.
  call.options.interrupt = [&tracker] { return tracker.ClientGone(); };
  return call;
}

template <typename Call>
absl::StatusOr<PlannedCall> KernelServiceImpl::Begin(Call& call) {
  deps_.metrics->Received(call.received_bytes());
  KS_RETURN_IF_ERROR(Authorize(*call.context()));
  KS_RETURN_IF_ERROR(call.tracker().Hold(call.received_bytes(), "request"));
  KS_RETURN_IF_ERROR(call.Parse());
  const auto& request = call.request();
  const v1::KernelConfig* config = nullptr;
  if constexpr (requires { request.config(); }) config = &request.config();
  return PlanRequest(ParamsOf(request), config, call.tracker());
}

grpc::ServerUnaryReactor* KernelServiceImpl::Execute(grpc::CallbackServerContext* context,
                                                     const Raw* request, Raw* response) {
  auto* call = new ExecuteCall(deps_.budget, deps_.metrics, context, request, response,
                               /*record=*/true);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_ASSIGN_OR_RETURN(PlannedCall planned, Begin(*call));
    call->response().set_request_id(call->request().request_id());
    KS_ASSIGN_OR_RETURN(TensorMap inputs, TakeTensors(call->request().mutable_inputs()));
    KS_RETURN_IF_ERROR(call->tracker().Hold(
        OutputBytes(*planned.kernel, SpecsOf(inputs), planned.attrs), "outputs"));
    const bool small = TensorBytes(inputs) <= kInlineRunBytes;
    const int worker = planned.worker;
    return Dispatch(
        context, worker,
        [this, call, planned = std::move(planned), inputs = std::move(inputs)](absl::Status status,
                                                                               int64_t queue_us) {
          if (status.ok()) {
            status = RunGuarded([&] { return RunCall(deps_, planned, inputs, &call->response()); });
          }
          call->response().mutable_timing()->set_queue_us(queue_us);
          call->Finish(status);
        },
        /*may_run_inline=*/small);
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
    KS_ASSIGN_OR_RETURN(PlannedCall planned, Begin(*call));
    v1::ExecuteBatchRequest& batch_request = call->request();
    call->response().set_request_id(batch_request.request_id());
    if (batch_request.items().empty()) {
      return absl::InvalidArgumentError("items: expected at least one item");
    }
    BatchOptions options;
    options.call = planned.options;
    for (int device : batch_request.devices()) {
      if (!deps_.pool->Owns(device)) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices: device ", device, " is not served by this server"));
      }
      options.devices.push_back(device);
    }
    BatchItems items = TakeBatchItems(&batch_request);
    if (items.inputs.empty()) return items.status.front();
    int64_t outputs = 0;
    for (const TensorMap& inputs : items.inputs) {
      const int64_t bytes = OutputBytes(*planned.kernel, SpecsOf(inputs), planned.attrs);
      if (__builtin_add_overflow(outputs, bytes, &outputs)) outputs = INT64_MAX;
    }
    KS_RETURN_IF_ERROR(call->tracker().Hold(outputs, "outputs"));
    const int worker = options.devices.empty() ? planned.worker : options.devices.front();
    return Dispatch(context, worker,
                    [this, call, planned = std::move(planned), options = std::move(options),
                     items = std::move(items)](absl::Status status, int64_t queue_us) {
                      absl::StatusOr<BatchResult> batch = absl::UnknownError("not run");
                      if (!status.ok()) batch = status;
                      if (status.ok()) {
                        absl::Status run = RunGuarded([&]() -> absl::Status {
                          batch = kernelserve::ExecuteBatch(*deps_.executor, planned.kernel->name(),
                                                            items.inputs, planned.attrs, options);
                          return absl::OkStatus();
                        });
                        if (!run.ok()) batch = run;
                      }
                      if (batch.ok()) {
                        FillBatchResponse(call->request(), items, *std::move(batch), planned,
                                          queue_us, *deps_.metrics, &call->response());
                      }
                      call->Finish(batch.status());
                    });
  });
  if (!status.ok()) call->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::Autotune(grpc::CallbackServerContext* context,
                                                      const Raw* request, Raw* response) {
  auto* call = new AutotuneCall(deps_.budget, deps_.metrics, context, request, response,
                                /*record=*/true);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_ASSIGN_OR_RETURN(PlannedCall planned, Begin(*call));
    KS_ASSIGN_OR_RETURN(TensorSpecMap specs, SpecsFromProto(call->request().inputs()));
    std::optional<TensorMap> inputs;
    if (AllHaveData(call->request().inputs())) {
      KS_ASSIGN_OR_RETURN(inputs, TakeTensors(call->request().mutable_inputs()));
    } else {
      // Inputs made up from shapes count like received ones, under a limit of their own.
      const int64_t synthesized = SpecBytes(specs);
      if (synthesized > deps_.options->max_synthetic_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("inputs given by shape only: ", synthesized,
                         " bytes to synthesize would pass --max-synthetic-bytes=",
                         deps_.options->max_synthetic_bytes, "; send the data, or smaller shapes"));
      }
      KS_RETURN_IF_ERROR(call->tracker().Hold(synthesized, "synthesized inputs"));
    }
    KS_RETURN_IF_ERROR(
        call->tracker().Hold(OutputBytes(*planned.kernel, specs, planned.attrs), "outputs"));
    const int worker = planned.worker;
    return Dispatch(
        context, worker,
        [this, call, planned = std::move(planned), specs = std::move(specs),
         inputs = std::move(inputs)](absl::Status status, int64_t /*queue_us*/) {
          absl::StatusOr<AutotuneResult> result = absl::UnknownError("not run");
          if (!status.ok()) result = status;
          if (status.ok()) {
            absl::Status run = RunGuarded([&]() -> absl::Status {
              result = deps_.executor->Autotune(planned.kernel->name(), specs, planned.attrs,
                                                planned.options, inputs ? &*inputs : nullptr);
              return absl::OkStatus();
            });
            if (!run.ok()) result = run;
          }
          const absl::Status outcome = call->tracker().Outcome(result.status());
          if (status.ok()) {
            const bool all_failed = result.ok() && result->selection.tune_report.has_value() &&
                                    result->selection.tune_report->all_failed;
            deps_.metrics->AutotuneRun(planned.kernel->name(),
                                       !outcome.ok() ? "error"
                                       : all_failed  ? "all_failed"
                                                     : "ok",
                                       call->tracker().seconds());
          }
          if (outcome.ok()) FillAutotune(*result, &call->response());
          call->Finish(outcome);
        });
  });
  if (!status.ok()) call->Finish(status);
  return reactor;
}

}  // namespace kernelserve::server
