#include "server/service.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

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

void SetStatus(const absl::Status& status, v1::RpcStatus* out) {
  out->set_code(status.raw_code());
  out->set_message(std::string(status.message()));
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
    if (!items.status[i].ok()) SetStatus(items.status[i], item->mutable_status());
  }
  for (size_t j = 0; j < items.index.size(); ++j) {
    v1::ExecuteResponse* item = response->mutable_items(static_cast<int>(items.index[j]));
    absl::StatusOr<ExecuteResult>& result = batch.items[j];
    if (!result.ok()) {
      SetStatus(result.status(), item->mutable_status());
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
    grpc::CallbackServerContext* context, int device, int64_t bytes,
    std::function<void(absl::Status status, int64_t queue_us)> run, bool may_run_inline) {
  InflightBudget& budget = *deps_.budget;
  if (!budget.TryAcquire(bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "in-flight request bytes: this request's ", bytes, " bytes with ", budget.bytes(),
        " bytes held would pass --max-inflight-bytes=", budget.max_bytes()));
  }
  deps_.metrics->InflightRequests(budget.requests());
  WorkItem item;
  item.deadline = context->deadline();
  item.cancelled = [context] { return context->IsCancelled(); };
  item.may_run_inline = may_run_inline;
  item.run = [this, bytes, run = std::move(run)](absl::Status status, int64_t queue_us) {
    run(std::move(status), queue_us);
    deps_.budget->Release(bytes);
    deps_.metrics->InflightRequests(deps_.budget->requests());
  };
  absl::Status submitted = deps_.pool->Submit(device, std::move(item));
  if (!submitted.ok()) {
    budget.Release(bytes);
    deps_.metrics->InflightRequests(budget.requests());
  }
  return submitted;
}

void KernelServiceImpl::Finish(grpc::ServerUnaryReactor* reactor, const absl::Status& status,
                               std::string_view kernel, std::string_view platform,
                               Clock::time_point start, int64_t response_bytes) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  deps_.metrics->Request(kernel, platform, absl::StatusCodeToString(status.code()), seconds);
  if (status.ok()) deps_.metrics->Sent(response_bytes);
  reactor->Finish(ToGrpcStatus(status));
}

template <typename Request>
absl::StatusOr<PlannedCall> KernelServiceImpl::Begin(const grpc::CallbackServerContext& context,
                                                     const Request& request, Labels* labels) {
  deps_.metrics->Received(static_cast<int64_t>(request.ByteSizeLong()));
  KS_RETURN_IF_ERROR(Authorize(context));
  labels->kernel = KernelLabel(*deps_.executor, request.kernel());
  KS_ASSIGN_OR_RETURN(PlannedCall call, PlanCall(*deps_.executor, *deps_.pool, ParamsOf(request)));
  labels->platform = call.platform;
  if constexpr (requires { request.config(); }) {
    if (IsSet(request.config())) call.options.config = FromProto(request.config());
  }
  return call;
}

grpc::ServerUnaryReactor* KernelServiceImpl::Execute(grpc::CallbackServerContext* context,
                                                     const v1::ExecuteRequest* request,
                                                     v1::ExecuteResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  response->set_request_id(request->request_id());
  Labels labels;
  absl::Status status = [&]() -> absl::Status {
    KS_ASSIGN_OR_RETURN(PlannedCall call, Begin(*context, *request, &labels));
    // gRPC owns the request until Finish; its tensor bytes are moved out rather than copied.
    auto* owned = const_cast<v1::ExecuteRequest*>(request);
    KS_ASSIGN_OR_RETURN(TensorMap inputs, TakeTensors(owned->mutable_inputs()));
    const int64_t bytes = TensorBytes(inputs);
    const int worker = call.worker;
    return Dispatch(
        context, worker, bytes,
        [this, reactor, response, start, call = std::move(call), inputs = std::move(inputs)](
            absl::Status status, int64_t queue_us) {
          if (status.ok()) status = RunCall(deps_, call, inputs, response);
          response->mutable_timing()->set_queue_us(queue_us);
          Finish(reactor, status, call.kernel->name(), call.platform, start,
                 static_cast<int64_t>(response->ByteSizeLong()));
        },
        /*may_run_inline=*/bytes <= kInlineRunBytes);
  }();
  if (!status.ok()) Finish(reactor, status, labels.kernel, labels.platform, start, 0);
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::ExecuteBatch(grpc::CallbackServerContext* context,
                                                          const v1::ExecuteBatchRequest* request,
                                                          v1::ExecuteBatchResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  response->set_request_id(request->request_id());
  Labels labels;
  absl::Status status = [&]() -> absl::Status {
    KS_ASSIGN_OR_RETURN(PlannedCall call, Begin(*context, *request, &labels));
    if (request->items().empty()) {
      return absl::InvalidArgumentError("items: expected at least one item");
    }
    BatchOptions options;
    options.call = call.options;
    for (int device : request->devices()) {
      if (!deps_.pool->Owns(device)) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices: device ", device, " is not served by this server"));
      }
      options.devices.push_back(device);
    }
    auto* owned = const_cast<v1::ExecuteBatchRequest*>(request);
    BatchItems items = TakeBatchItems(owned);
    if (items.inputs.empty()) return items.status.front();
    const int worker = options.devices.empty() ? call.worker : options.devices.front();
    const int64_t bytes = items.bytes;
    return Dispatch(context, worker, bytes,
                    [this, reactor, request, response, start, call = std::move(call),
                     options = std::move(options),
                     items = std::move(items)](absl::Status status, int64_t queue_us) {
                      absl::StatusOr<BatchResult> batch =
                          status.ok()
                              ? kernelserve::ExecuteBatch(*deps_.executor, call.kernel->name(),
                                                          items.inputs, call.attrs, options)
                              : absl::StatusOr<BatchResult>(status);
                      if (batch.ok()) {
                        FillBatchResponse(*request, items, *std::move(batch), call, queue_us,
                                          *deps_.metrics, response);
                      }
                      Finish(reactor, batch.status(), call.kernel->name(), call.platform, start,
                             static_cast<int64_t>(response->ByteSizeLong()));
                    });
  }();
  if (!status.ok()) Finish(reactor, status, labels.kernel, labels.platform, start, 0);
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::Autotune(grpc::CallbackServerContext* context,
                                                      const v1::AutotuneRequest* request,
                                                      v1::AutotuneResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Labels labels;
  absl::Status status = [&]() -> absl::Status {
    KS_ASSIGN_OR_RETURN(PlannedCall call, Begin(*context, *request, &labels));
    KS_ASSIGN_OR_RETURN(TensorSpecMap specs, SpecsFromProto(request->inputs()));
    std::optional<TensorMap> inputs;
    if (AllHaveData(request->inputs())) {
      auto* owned = const_cast<v1::AutotuneRequest*>(request);
      KS_ASSIGN_OR_RETURN(inputs, TakeTensors(owned->mutable_inputs()));
    }
    const int64_t bytes = inputs.has_value() ? TensorBytes(*inputs) : 0;
    const int worker = call.worker;
    return Dispatch(
        context, worker, bytes,
        [this, reactor, response, start, call = std::move(call), specs = std::move(specs),
         inputs = std::move(inputs)](absl::Status status, int64_t /*queue_us*/) {
          absl::StatusOr<AutotuneResult> result =
              status.ok() ? deps_.executor->Autotune(call.kernel->name(), specs, call.attrs,
                                                     call.options, inputs ? &*inputs : nullptr)
                          : absl::StatusOr<AutotuneResult>(status);
          const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          if (result.ok()) {
            const bool all_failed = result->selection.tune_report.has_value() &&
                                    result->selection.tune_report->all_failed;
            deps_.metrics->AutotuneRun(call.kernel->name(), all_failed ? "all_failed" : "ok",
                                       seconds);
            FillAutotune(*result, response);
          } else if (status.ok()) {
            deps_.metrics->AutotuneRun(call.kernel->name(), "error", seconds);
          }
          Finish(reactor, result.status(), call.kernel->name(), call.platform, start,
                 static_cast<int64_t>(response->ByteSizeLong()));
        });
  }();
  if (!status.ok()) Finish(reactor, status, labels.kernel, labels.platform, start, 0);
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::Inline(grpc::CallbackServerContext* context,
                                                    const std::function<absl::Status()>& body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(*context);
  if (status.ok()) status = body();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace kernelserve::server
