// The call pipeline's steps (server/pipeline.h).
#include "server/pipeline.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"
#include "server/status.h"

namespace kernelserve::server {
namespace {

// The kernel's name for metric labels; "unknown" for names the registry does not know (so
// arbitrary client text never becomes a label).
std::string KernelLabel(const Executor& executor, const std::string& name) {
  absl::StatusOr<const Kernel*> kernel = executor.registry().Find(name);
  return kernel.ok() ? (*kernel)->name() : std::string("unknown");
}

// An ExecuteRequest with at most this many input bytes may run on the gRPC thread (MayRunInline).
constexpr int64_t kInlineRunBytes = 64 << 10;

}  // namespace

absl::StatusOr<Caller> Authenticate(const AccessDeps& deps,
                                    const grpc::CallbackServerContext& context) {
  if (deps.auth == nullptr) return Caller();
  return deps.auth->Authenticate(context);
}

Caller CallerWithPeer(const AccessDeps& deps, const grpc::CallbackServerContext& context,
                      Caller caller) {
  if (!caller.peer.uid.has_value() && deps.peers != nullptr) {
    caller.peer = deps.peers->Find(context.peer());
  }
  return caller;
}

absl::StatusOr<Admitted> Admit(const AccessDeps& deps, const grpc::CallbackServerContext& context) {
  Admitted admitted;
  KS_ASSIGN_OR_RETURN(admitted.caller, Authenticate(deps, context));
  if (deps.tenants != nullptr) {
    KS_ASSIGN_OR_RETURN(admitted.tenant, deps.tenants->Admit(admitted.caller.identity));
  }
  return admitted;
}

absl::Status Admit(const AccessDeps& deps, CallTracker& tracker) {
  KS_ASSIGN_OR_RETURN(Admitted admitted, Admit(deps, *tracker.context()));
  tracker.set_caller(std::move(admitted.caller), std::move(admitted.tenant));
  return absl::OkStatus();
}

absl::Status AdmitItem(Tenant& tenant, Metrics& metrics) {
  absl::Status rate = tenant.TakeRequest();
  if (!rate.ok()) metrics.QuotaRefusal(tenant.label(), "rate");
  return rate;
}

absl::Status RequireAdmin(const Caller& caller, std::string_view method) {
  if (caller.admin()) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(Sv(method), " needs the admin role; identity '", caller.identity, "' has the ",
                   Sv(RoleName(caller.role)),
                   " role (roles come from --auth-token-file or --admin-identities)"));
}

template <typename Request>
absl::StatusOr<CallPlan> PlanRequest(const CallDeps& deps, const Request& request,
                                     CallTracker& tracker) {
  tracker.kernel = KernelLabel(*deps.executor, request.kernel());
  KS_ASSIGN_OR_RETURN(CallParams params, ParamsOf(request));
  if constexpr (std::is_same_v<Request, v1::ExecuteRequest>) {
    // Where the request's CUDA regions and resident tensors are, when it names no device.
    if (!params.device) {
      KS_ASSIGN_OR_RETURN(params.device,
                          DataGpu(deps.shared_memory, deps.resident, tracker.caller(), request));
    }
  }
  ExecuteOptions options;
  if constexpr (requires { request.config(); }) {
    if (IsSet(request.config())) options.config = FromProto(request.config());
  }
  // Stops the call's work once its client is gone; `tracker` outlives the run.
  options.interrupt = [&tracker] { return tracker.ClientGone(); };
  // A call that tunes on a miss holds the tuner's copies of its outputs too (on the worker,
  // which has the tracker then): counted like its own, or refused before tuning.
  options.reserve_tuning = [&tracker](int64_t bytes) {
    return tracker.Hold(bytes, "the tuner's copies of the outputs");
  };
  KS_ASSIGN_OR_RETURN(CallPlan plan, PlanCall(*deps.executor, *deps.pool, params, options));
  tracker.platform = plan.invocation.platform;
  return plan;
}

template absl::StatusOr<CallPlan> PlanRequest(const CallDeps&, const v1::ExecuteRequest&,
                                              CallTracker&);
template absl::StatusOr<CallPlan> PlanRequest(const CallDeps&, const v1::ExecuteBatchRequest&,
                                              CallTracker&);
template absl::StatusOr<CallPlan> PlanRequest(const CallDeps&, const v1::AutotuneRequest&,
                                              CallTracker&);

absl::Status CheckOutputsProduced(const CallPlan& plan, const std::vector<std::string>& outputs) {
  if (outputs.empty()) return absl::OkStatus();
  const TensorSpecMap produced = plan.kernel->OutputSpecs(*plan.problem);
  for (const std::string& name : outputs) {
    if (produced.contains(name)) continue;
    std::string when;
    for (const OutputSchema& output : plan.kernel->schema().outputs) {
      if (output.name == name) when = output.doc;
    }
    return absl::InvalidArgumentError(absl::StrCat("output '", name,
                                                   "' is not produced by this call (", when,
                                                   "): set the parameter that asks for it"));
  }
  return absl::OkStatus();
}

CallRegionRefs RegionRefsOf(const v1::ExecuteRequest& request) {
  CallRegionRefs refs;
  for (const auto& [name, tensor] : request.inputs()) {
    if (!tensor.has_ref()) continue;
    const v1::TensorRef& ref = tensor.ref();
    if (!ref.tensor().empty()) {
      refs.resident_inputs[name] = ref.tensor();
    } else {
      refs.inputs[name] = {ref.region(), ref.offset(), ref.byte_size()};
    }
  }
  for (const auto& [name, ref] : request.output_regions()) {
    if (!ref.tensor().empty()) {
      refs.resident_outputs[name] = ref.tensor();
    } else {
      refs.outputs[name] = {ref.region(), ref.offset(), ref.byte_size()};
    }
  }
  return refs;
}

namespace {

// InvalidArgument naming `what` for a ref that names a resident tensor and a region's range too.
absl::Status CheckTensorRef(const v1::TensorRef& ref, const std::string& what) {
  if (ref.region().empty() && ref.offset() == 0 && ref.byte_size() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": its ref names resident tensor '", ref.tensor(),
      "' and a region's range too; set tensor alone, or region, offset and byte_size"));
}

// What `request` states of the dtype and shape of its resident inputs; InvalidArgument as
// CheckTensorRef, or for data sent with the ref.
absl::StatusOr<std::map<std::string, StatedSpec>> StatedSpecs(const v1::ExecuteRequest& request,
                                                              const ResidentRefs& refs) {
  std::map<std::string, StatedSpec> stated;
  for (const auto& [name, tensor_name] : refs) {
    const std::string what = absl::StrCat("input '", name, "'");
    auto proto = request.inputs().find(name);
    if (proto == request.inputs().end()) {
      return absl::InternalError(absl::StrCat(what, ": a resident tensor but not in the request"));
    }
    const v1::Tensor& tensor = proto->second;
    KS_RETURN_IF_ERROR(CheckTensorRef(tensor.ref(), what));
    if (!tensor.data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data and ref both set; send the bytes one way"));
    }
    StatedSpec& said = stated[name];
    if (tensor.dtype() != v1::DTYPE_UNSPECIFIED) {
      KS_ASSIGN_OR_RETURN(said.dtype, FromProto(tensor.dtype(), what));
    }
    if (tensor.shape_size() > 0) said.shape = Shape(tensor.shape().begin(), tensor.shape().end());
  }
  return stated;
}

// The inputs of `inputs` read from the caller's regions (`refs`) that the kernel updates in
// place, made the call's own copies: the kernel writes into them, and a client's region is an
// input, never written. A CUDA region's would need a copy on its GPU: InvalidArgument saying
// what to send instead.
absl::Status CopyUpdatedInputs(const CallPlan& plan, const RegionRefs& refs, TensorMap& inputs) {
  for (const auto& [name, ref] : refs) {
    if (!IsUpdated(plan.kernel->schema(), name)) continue;
    Tensor& tensor = inputs.at(name);
    if (tensor.device() >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is updated in place by ", plan.kernel->name(),
                       " and may not be in a CUDA region ('", ref.region,
                       "'); send it inline or in a system "
                       "region, or name a resident tensor to have the update kept"));
    }
    KS_ASSIGN_OR_RETURN(
        tensor, Tensor::FromBytes(tensor.dtype(), tensor.shape(), std::string(tensor.bytes())));
  }
  return absl::OkStatus();
}

// The resident inputs and outputs of `refs` into `call` (its inputs, output spans, regions and
// lease).
absl::Status TakeResident(const ResidentTensors* resident, const Caller& caller,
                          const CallRegionRefs& refs, const v1::ExecuteRequest& request,
                          PreparedCall& call) {
  if (refs.resident_inputs.empty() && refs.resident_outputs.empty()) return absl::OkStatus();
  for (const auto& [name, tensor_name] : refs.resident_outputs) {
    auto ref = request.output_regions().find(name);
    if (ref != request.output_regions().end()) {
      KS_RETURN_IF_ERROR(CheckTensorRef(ref->second, absl::StrCat("output '", name, "'")));
    }
  }
  KS_ASSIGN_OR_RETURN(auto stated, StatedSpecs(request, refs.resident_inputs));
  call.lease = std::make_shared<ResidentLease>(resident);
  KS_ASSIGN_OR_RETURN(
      TensorMap inputs,
      InputsFromResident(resident, caller, call.plan.kernel->schema(), refs.resident_inputs, stated,
                         call.plan.ordinal(), call.regions.get(), call.lease.get()));
  call.inputs.merge(inputs);
  return OutputsToResident(resident, caller, call.plan, refs.resident_outputs, refs.resident_inputs,
                           &call.output_spans, call.regions.get(), call.lease.get());
}

}  // namespace

absl::StatusOr<PreparedCall> TakeInputs(const SharedMemoryRegistry* registry, const Caller& caller,
                                        CallPlan plan, const CallRegionRefs& regions,
                                        v1::ExecuteRequest* request,
                                        const wire::TensorBuffers* buffers,
                                        const ResidentTensors* resident) {
  PreparedCall call;
  call.plan = std::move(plan);
  TensorSpecMap specs;  // of the inputs in regions, as the request gives them
  for (const auto& [name, ref] : regions.inputs) {
    const std::string what = absl::StrCat("input '", name, "'");
    auto proto = request->inputs().find(name);
    if (proto == request->inputs().end()) {
      return absl::InternalError(absl::StrCat(what, ": in a region but not in the request"));
    }
    if (!proto->second.data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data and ref both set; send the bytes one way"));
    }
    KS_ASSIGN_OR_RETURN(specs[name], SpecFromProto(proto->second, what));
  }
  if (!regions.inputs.empty() || !regions.outputs.empty() || !regions.resident_inputs.empty() ||
      !regions.resident_outputs.empty()) {
    call.regions = std::make_shared<CallRegions>();
  }
  KS_ASSIGN_OR_RETURN(call.inputs, InputsFromRegions(registry, caller, regions.inputs, specs,
                                                     call.plan.ordinal(), call.regions.get()));
  KS_RETURN_IF_ERROR(CopyUpdatedInputs(call.plan, regions.inputs, call.inputs));
  KS_ASSIGN_OR_RETURN(call.output_spans, OutputSpansOf(registry, caller, call.plan, regions.outputs,
                                                       call.regions.get()));
  KS_RETURN_IF_ERROR(TakeResident(resident, caller, regions, *request, call));
  for (const auto& [name, ref] : regions.inputs) request->mutable_inputs()->erase(name);
  for (const auto& [name, ref] : regions.resident_inputs) request->mutable_inputs()->erase(name);
  KS_ASSIGN_OR_RETURN(TensorMap sent,
                      TakeTensors(request->mutable_inputs(), buffers, &call.plan.kernel->schema()));
  call.inputs.merge(sent);
  return call;
}

absl::Status Reserve(const ServerOptions& options, const PreparedCall& call,
                     const std::vector<std::string>& outputs, CallTracker& tracker) {
  KS_RETURN_IF_ERROR(CheckAnswerFits(
      options, AnsweredOutputBytes(call.plan, &call.output_spans, outputs), "the answer"));
  return tracker.Hold(OutputBytes(call.plan), "outputs");
}

absl::StatusOr<PreparedCall> Prepare(const CallDeps& deps, const CallRequest& request,
                                     CallTracker& tracker) {
  KS_RETURN_IF_ERROR(FillResidentSpecs(deps.resident, tracker.caller(), request.request));
  KS_ASSIGN_OR_RETURN(CallPlan plan, PlanRequest(deps, *request.request, tracker));
  KS_RETURN_IF_ERROR(CheckOutputsProduced(plan, request.outputs));
  KS_ASSIGN_OR_RETURN(PreparedCall call,
                      TakeInputs(deps.shared_memory, tracker.caller(), std::move(plan),
                                 request.regions, request.request, request.buffers, deps.resident));
  KS_RETURN_IF_ERROR(Reserve(*deps.options, call, request.outputs, tracker));
  return call;
}

absl::Status Dispatch(WorkerPool& pool, grpc::CallbackServerContext* context, int worker,
                      std::function<void(absl::Status status, int64_t queue_us)> run,
                      bool may_run_inline, std::chrono::system_clock::time_point deadline) {
  WorkItem item;
  item.deadline = std::min(context->deadline(), deadline);
  item.cancelled = [context] { return context->IsCancelled(); };
  item.may_run_inline = may_run_inline;
  item.run = std::move(run);
  return pool.Submit(worker, std::move(item));
}

bool MayRunInline(const PreparedCall& call) { return TensorBytes(call.inputs) <= kInlineRunBytes; }

namespace {

// Waits for `call`'s lease (see Run).
absl::Status AcquireLease(const CallDeps& deps, const PreparedCall& call,
                          const CallTracker& tracker) {
  // While it waits, the call does not count as running on its GPU: a call holding the tensors
  // may be tuning there, waiting for the GPU's other calls to stop (WorkerPool::HoldExclusive).
  std::unique_ptr<DeviceHold> aside;
  if (call.plan.ordinal() >= 0) aside = deps.pool->StepAside(call.plan.ordinal());
  const auto until = tracker.context()->deadline();
  const absl::Time deadline = until == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(until);
  if (call.lease->Acquire(deadline)) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the call's deadline passed while other calls held resident tensor(s) ",
                   call.lease->Names()));
}

}  // namespace

absl::Status Run(const CallDeps& deps, const PreparedCall& call, absl::Status status,
                 CallWaits waits, const CallTracker& tracker, v1::ExecuteResponse* response,
                 wire::TensorBuffers* buffers) {
  if (status.ok() && call.lease != nullptr) status = AcquireLease(deps, call, tracker);
  if (status.ok()) {
    status = RunGuarded([&] {
      return RunCall(deps, call.plan, call.inputs, response, buffers, &call.output_spans,
                     call.regions.get());
    });
  }
  // Done with its regions and resident tensors before it answers: a client that deletes a
  // tensor as soon as its call is answered finds no call holding it.
  if (call.lease != nullptr) call.lease->Release();
  if (call.regions != nullptr) call.regions->Release();
  response->mutable_timing()->set_queue_us(waits.queue_us);
  response->mutable_timing()->set_recv_us(waits.recv_us);
  RecordInference(deps.stats, call.plan.kernel->name(), tracker.Outcome(status), response->timing(),
                  tracker.seconds());
  return status;
}

}  // namespace kernelserve::server
