#include "server/handler_steps.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"

namespace kernelserve::server {
namespace {

// The kernel's name for metric labels; "unknown" for names the registry does not know (so
// arbitrary client text never becomes a label).
std::string KernelLabel(const Executor& executor, const std::string& name) {
  absl::StatusOr<const Kernel*> kernel = executor.registry().Find(name);
  return kernel.ok() ? (*kernel)->name() : std::string("unknown");
}

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

absl::StatusOr<Admitted> Admit(const AccessDeps& deps,
                               const grpc::CallbackServerContext& context) {
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
    // Where the request's CUDA regions are, when it names no device.
    if (!params.device) params.device = RegionsGpu(deps.shared_memory, tracker.caller(), request);
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

}  // namespace kernelserve::server
