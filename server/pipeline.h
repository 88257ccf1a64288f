// The call pipeline: the steps of every kernel call, whatever its front door (kernelserve.v1's
// Execute and ExecuteStream, the Open Inference Protocol's ModelInfer and ModelStreamInfer), in
// call order:
//   1. Admit       who calls (Authenticate) and at what rate (the identity's quota); a unary
//                  call then holds its received bytes and parses them (AdmitAndParse), a
//                  stream's later item takes the rate alone (AdmitItem). AccessDeps.
//   2. Plan        PlanRequest: the executor's plan of the request in the native form.
//                  CallDeps' executor, pool and shared memory.
//   3. TakeInputs  the tensors the request carries and those in the caller's shared-memory
//                  regions, with the regions its outputs go to: one PreparedCall. The registry.
//   4. Reserve     the answer fits --max-message-bytes; the outputs held in the budget. The
//                  options and the call's tracker.
//   5. Dispatch    the work queued on the plan's worker. The pool.
//   6. Run         on the worker: RunCall and RecordInference. CallDeps.
//   7. Answer      the front door's own: an ExecuteResponse, or kserve::ToInferResponse.
// Prepare is steps 2-4 for a request its front door parsed into a CallRequest. The front doors
// (server/service.cc, kserve_service.cc and the streams' Protocol policies, stream_reactor.h)
// are thin adapters: parse their protocol into a CallRequest, Prepare, Dispatch, Run, answer in
// their protocol; no front door writes out a step of its own. ExecuteBatch and Autotune take
// steps 1, 2 and 5 (their inputs and runs are theirs); the admin and shared-memory calls step 1.
// A step takes the part of ServiceDeps it uses (server/service_deps.h) or single pointers, never
// the whole; only the handlers hold the whole.
#ifndef KERNELSERVE_SERVER_PIPELINE_H_
#define KERNELSERVE_SERVER_PIPELINE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status_macros.h"
#include "proto/region_ref.h"
#include "proto/tensor_wire.h"
#include "server/call.h"
#include "server/call_tracker.h"
#include "server/identity.h"
#include "server/region_tensors.h"
#include "server/resident.h"
#include "server/resident_refs.h"
#include "server/service_deps.h"

namespace kernelserve::server {

// --- 1. Admit ---

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

// A stream's item after its first (the stream's Admit took the first): taken from `tenant`'s
// request rate, ResourceExhausted naming the quota (counted in `metrics`) when it has none left.
absl::Status AdmitItem(Tenant& tenant, Metrics& metrics);

// A unary kernel call (a UnaryCall) from its bytes: counts them received, admits the call
// (Admit), takes the bytes from the in-flight budget, then parses them (an ExecuteRequest's
// large tensors into deps.host_allocator's buffers). Errors as each of those.
template <typename Call>
absl::Status AdmitAndParse(const AccessDeps& access, const CallDeps& deps, Call& call) {
  deps.metrics->Received(call.received_bytes());
  KS_RETURN_IF_ERROR(Admit(access, call.tracker()));
  KS_RETURN_IF_ERROR(call.tracker().Hold(call.received_bytes(), "request"));
  return call.Parse(deps.host_allocator);
}

// OK for an admin; PermissionDenied naming `method`, the caller's identity and role otherwise.
absl::Status RequireAdmin(const Caller& caller, std::string_view method);

// --- 2. Plan ---

// Plans a parsed request once (the executor's plan: kernel, analysis, platform, worker, cache
// key) from its fields, with its explicit config when it has one and the interrupt (deadline,
// cancellation) of `tracker`'s call, and the tuner's copies of the outputs held by `tracker`
// when the call tunes (ExecuteOptions::reserve_tuning). An ExecuteRequest that names no device
// runs on the GPU of its CUDA regions and resident tensors (DataGpu; its error). Labels the
// tracker's metrics with the kernel and platform as far as it gets. Request: v1::ExecuteRequest,
// v1::ExecuteBatchRequest or v1::AutotuneRequest. `tracker` must outlive the run of the plan.
template <typename Request>
absl::StatusOr<CallPlan> PlanRequest(const CallDeps& deps, const Request& request,
                                     CallTracker& tracker);

// InvalidArgument when the planned call will not produce an output of `outputs` (naming it and
// what its schema says of when it is produced).
absl::Status CheckOutputsProduced(const CallPlan& plan, const std::vector<std::string>& outputs);

// --- 3. TakeInputs ---

// Where a call's tensors lie in the caller's shared memory, as its front door names them
// (kernelserve.v1's TensorRef and output_regions, the v2 shared_memory_* parameters). A value
// type.
struct CallRegionRefs {
  RegionRefs inputs;              // inputs in regions; the request keeps their dtype and shape
  RegionRefs outputs;             // outputs to write into regions
  ResidentRefs resident_inputs;   // inputs that are the caller's resident tensors
  ResidentRefs resident_outputs;  // outputs written into the caller's resident tensors
};
// The refs of a kernelserve.v1 request: its inputs that carry a ref, its output_regions; those
// naming a tensor (TensorRef.tensor) as resident ones.
CallRegionRefs RegionRefsOf(const v1::ExecuteRequest& request);

// A kernel call as its front door parsed it: the native request and what the front door knows
// besides. Borrows `request` and `buffers`, which must outlive Prepare. A value type.
struct CallRequest {
  v1::ExecuteRequest* request = nullptr;   // REQUIRED; its tensor bytes are taken out
  wire::TensorBuffers* buffers = nullptr;  // where `request`'s large tensor bytes are; nullable
  CallRegionRefs regions;
  std::vector<std::string> outputs;  // the outputs its answer carries; empty = all produced
};

// A call ready to dispatch: the plan, every input as a tensor, the regions its outputs are
// written into, and the regions it holds until it ends (shared by the copies of the work item
// that runs it). A value type.
struct PreparedCall {
  CallPlan plan;
  TensorMap inputs;
  OutputSpans output_spans;
  std::shared_ptr<CallRegions> regions;  // null = none
  // The resident tensors it reads and writes, locked while it runs (Run); null = none.
  std::shared_ptr<ResidentLease> lease;
};

// The inputs of `request` as tensors, whichever front door: those of regions.inputs read from
// the caller's regions (InputsFromRegions; their dtype and shape from the request), the others
// moved out of the request (TakeTensors, from `buffers` where they are there), and the spans
// of regions.outputs (OutputSpansOf). InvalidArgument for an input with both data and a region,
// or naming the tensor and region whose range does not fit it; NotFound for a region the
// caller has not registered (another caller's included); Unimplemented when `registry` is null
// and the call names a region. The resident tensors of regions.resident_inputs and
// resident_outputs come from `resident` (InputsFromResident, OutputsToResident; their errors),
// in the call's lease; InvalidArgument for a ref that names both a tensor and a region.
absl::StatusOr<PreparedCall> TakeInputs(const SharedMemoryRegistry* registry, const Caller& caller,
                                        CallPlan plan, const CallRegionRefs& regions,
                                        v1::ExecuteRequest* request,
                                        const wire::TensorBuffers* buffers,
                                        const ResidentTensors* resident = nullptr);

// --- 4. Reserve ---

// OK when the answer of `call` fits (CheckAnswerFits: its outputs but those in regions and,
// when `outputs` is not empty, those it does not name), then its outputs held by `tracker`.
// ResourceExhausted naming --max-message-bytes, or as CallTracker::Hold; nothing held then.
absl::Status Reserve(const ServerOptions& options, const PreparedCall& call,
                     const std::vector<std::string>& outputs, CallTracker& tracker);

// Steps 2-4: the request's resident inputs' specs filled in (FillResidentSpecs), Plan,
// CheckOutputsProduced, TakeInputs, Reserve; the first error.
absl::StatusOr<PreparedCall> Prepare(const CallDeps& deps, const CallRequest& request,
                                     CallTracker& tracker);

// --- 5. Dispatch ---

// Queues `run` on `worker`, to be dropped (DeadlineExceeded, Cancelled) when not started by the
// call's deadline or `deadline`, whichever comes first, or once the client cancels.
// ResourceExhausted when the queue is full, Unavailable when shutting down (run not called).
// `run` must not throw. `may_run_inline`: see WorkItem::may_run_inline.
absl::Status Dispatch(
    WorkerPool& pool, grpc::CallbackServerContext* context, int worker,
    std::function<void(absl::Status status, int64_t queue_us)> run, bool may_run_inline = false,
    std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max());

// True for a unary call small enough (inputs of at most 64 KiB) to run on the gRPC thread when
// its worker is idle: the hand-off to the worker thread was a tenth of a tiny call's latency.
bool MayRunInline(const PreparedCall& call);

// --- 6. Run ---

// The times of a call spent outside its run.
struct CallWaits {
  int64_t queue_us = 0;  // queued for its worker
  int64_t recv_us = 0;   // parsing its request
};

// On the worker: runs `call` (RunCall, under RunGuarded) unless `status` (the worker's: the call
// was dropped) is not OK, once its lease is granted (waiting, aside from its GPU's other work,
// until the call's deadline: DeadlineExceeded naming the tensors then), into `response` (outputs of
// call.output_spans written into their regions, the others kept in `buffers` when non-null, as
// FillResponse), with `waits` in its timing, and counts the inference with the code the client sees
// (RecordInference); then gives its lease back and stops counting in its regions, before the
// front door answers. Returns the run's status.
absl::Status Run(const CallDeps& deps, const PreparedCall& call, absl::Status status,
                 CallWaits waits, const CallTracker& tracker, v1::ExecuteResponse* response,
                 wire::TensorBuffers* buffers);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_PIPELINE_H_
