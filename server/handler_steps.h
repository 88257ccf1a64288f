// The steps every kernel call handler takes, whatever its protocol (kernelserve.v1 or the
// Open Inference Protocol): authorize, plan the parsed request, hand the work to a device
// worker.
#ifndef KERNELSERVE_SERVER_HANDLER_STEPS_H_
#define KERNELSERVE_SERVER_HANDLER_STEPS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/call.h"
#include "server/call_tracker.h"
#include "server/identity.h"

namespace kernelserve::server {

// The caller of a call (deps.auth's Authenticate; the anonymous admin without one).
// Unauthenticated when the server has tokens and the call carries none or a wrong one.
absl::StatusOr<Caller> Authenticate(const AccessDeps& deps,
                                    const grpc::CallbackServerContext& context);

// `caller` with its peer credentials looked up (deps.peers) where Authenticate left them unknown:
// the owner of a loopback TCP client's socket, read from the kernel's socket tables (for the
// calls that need it: shared-memory registrations).
Caller CallerWithPeer(const AccessDeps& deps, const grpc::CallbackServerContext& context,
                      Caller caller);

// A call let in: its caller and the state of the caller's identity (null without deps.tenants).
struct Admitted {
  Caller caller;
  std::shared_ptr<Tenant> tenant;
};
// Authenticates the call and takes it from its identity's request rate: errors as Authenticate,
// and ResourceExhausted naming the identity's rate quota.
absl::StatusOr<Admitted> Admit(const AccessDeps& deps, const grpc::CallbackServerContext& context);
// The same for a call that has a tracker: the tracker then knows its caller and tenant.
absl::Status Admit(const AccessDeps& deps, CallTracker& tracker);

// OK for an admin; PermissionDenied naming `method`, the caller's identity and role otherwise.
absl::Status RequireAdmin(const Caller& caller, std::string_view method);

// Plans a parsed request once (the executor's plan: kernel, analysis, platform, worker, cache
// key) from its fields, with its explicit config when it has one and the interrupt (deadline,
// cancellation) of `tracker`'s call, and the tuner's copies of the outputs held by `tracker`
// when the call tunes (ExecuteOptions::reserve_tuning). Labels the tracker's metrics with the
// kernel and platform as far as it gets. Request: v1::ExecuteRequest, v1::ExecuteBatchRequest or
// v1::AutotuneRequest.
template <typename Request>
absl::StatusOr<CallPlan> PlanRequest(const CallDeps& deps, const Request& request,
                                     CallTracker& tracker);

// Queues `run` on `worker`, to be dropped (DeadlineExceeded, Cancelled) when not started by the
// call's deadline or `deadline`, whichever comes first, or once the client cancels.
// ResourceExhausted when the queue is full, Unavailable when shutting down (run not called).
// `run` must not throw. `may_run_inline`: see WorkItem::may_run_inline.
absl::Status Dispatch(
    WorkerPool& pool, grpc::CallbackServerContext* context, int worker,
    std::function<void(absl::Status status, int64_t queue_us)> run, bool may_run_inline = false,
    std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max());

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_HANDLER_STEPS_H_
