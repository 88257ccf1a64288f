// KernelServiceImpl: the kernelserve.v1.KernelService handlers on gRPC's callback API. Thin:
// the kernel calls are adapters over the call pipeline (server/pipeline.h), the admin and
// shared-memory and resident-tensor calls admit the caller and answer on gRPC's thread. Every
// method is registered raw (gRPC hands over the received bytes; see UnaryCall).
#ifndef KERNELSERVE_SERVER_SERVICE_H_
#define KERNELSERVE_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <functional>

#include "absl/status/status.h"
#include "core/status_macros.h"
#include "proto/kernel_service_grpc.h"
#include "server/autotune_stream.h"
#include "server/batch_call.h"
#include "server/call.h"
#include "server/call_tracker.h"
#include "server/pipeline.h"
#include "server/service_deps.h"
#include "server/unary_call.h"

namespace kernelserve::server {

// The generated service with every method taking raw bytes.
namespace raw_service {
using S = v1::KernelService;
using Shm = S::WithRawCallbackMethod_RegisterSystemSharedMemory<
    S::WithRawCallbackMethod_RegisterCudaSharedMemory<
        S::WithRawCallbackMethod_UnregisterSharedMemory<
            S::WithRawCallbackMethod_SharedMemoryStatus<S::Service>>>>;
using Resident = S::WithRawCallbackMethod_CreateTensor<
    S::WithRawCallbackMethod_WriteTensor<S::WithRawCallbackMethod_ReadTensor<
        S::WithRawCallbackMethod_DeleteTensor<S::WithRawCallbackMethod_ListTensors<Shm>>>>>;
using Admin = S::WithRawCallbackMethod_ListKernels<
    S::WithRawCallbackMethod_GetServerInfo<S::WithRawCallbackMethod_ListConfigs<
        S::WithRawCallbackMethod_PutConfig<S::WithRawCallbackMethod_DeleteConfig<Resident>>>>>;
using All = S::WithRawCallbackMethod_Execute<
    S::WithRawCallbackMethod_ExecuteStream<S::WithRawCallbackMethod_ExecuteBatch<
        S::WithRawCallbackMethod_Autotune<S::WithRawCallbackMethod_AutotuneStream<Admin>>>>>;
}  // namespace raw_service
using RawKernelService = raw_service::All;

// Thread safety: thread-safe; gRPC calls the handlers from many threads.
class KernelServiceImpl final : public RawKernelService {
 public:
  // `deps` pointers are borrowed and must outlive the service and every call it starts.
  explicit KernelServiceImpl(ServiceDeps deps) : deps_(std::move(deps)) {}

  using Raw = grpc::ByteBuffer;
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context, const Raw* request,
                                    Raw* response) override;
  grpc::ServerBidiReactor<Raw, Raw>* ExecuteStream(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ExecuteBatch(grpc::CallbackServerContext* context, const Raw* request,
                                         Raw* response) override;
  grpc::ServerUnaryReactor* Autotune(grpc::CallbackServerContext* context, const Raw* request,
                                     Raw* response) override;
  grpc::ServerWriteReactor<Raw>* AutotuneStream(grpc::CallbackServerContext* context,
                                                const Raw* request) override;
  grpc::ServerUnaryReactor* ListKernels(grpc::CallbackServerContext* context, const Raw* request,
                                        Raw* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context, const Raw* request,
                                          Raw* response) override;
  grpc::ServerUnaryReactor* ListConfigs(grpc::CallbackServerContext* context, const Raw* request,
                                        Raw* response) override;
  grpc::ServerUnaryReactor* PutConfig(grpc::CallbackServerContext* context, const Raw* request,
                                      Raw* response) override;
  grpc::ServerUnaryReactor* DeleteConfig(grpc::CallbackServerContext* context, const Raw* request,
                                         Raw* response) override;
  grpc::ServerUnaryReactor* RegisterSystemSharedMemory(grpc::CallbackServerContext* context,
                                                       const Raw* request, Raw* response) override;
  grpc::ServerUnaryReactor* RegisterCudaSharedMemory(grpc::CallbackServerContext* context,
                                                     const Raw* request, Raw* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(grpc::CallbackServerContext* context,
                                                   const Raw* request, Raw* response) override;
  grpc::ServerUnaryReactor* SharedMemoryStatus(grpc::CallbackServerContext* context,
                                               const Raw* request, Raw* response) override;
  grpc::ServerUnaryReactor* CreateTensor(grpc::CallbackServerContext* context, const Raw* request,
                                         Raw* response) override;
  grpc::ServerUnaryReactor* WriteTensor(grpc::CallbackServerContext* context, const Raw* request,
                                        Raw* response) override;
  grpc::ServerUnaryReactor* ReadTensor(grpc::CallbackServerContext* context, const Raw* request,
                                       Raw* response) override;
  grpc::ServerUnaryReactor* DeleteTensor(grpc::CallbackServerContext* context, const Raw* request,
                                         Raw* response) override;
  grpc::ServerUnaryReactor* ListTensors(grpc::CallbackServerContext* context, const Raw* request,
                                        Raw* response) override;

 private:
  using ExecuteCall = UnaryCall<v1::ExecuteRequest, v1::ExecuteResponse>;
  using BatchCall = UnaryCall<v1::ExecuteBatchRequest, v1::ExecuteBatchResponse>;
  using AutotuneCall = UnaryCall<v1::AutotuneRequest, v1::AutotuneResponse>;

  // Autotune's and AutotuneStream's steps up to the worker: admit, parse, plan (the stream's
  // progress told to the call), take or size the inputs, dispatch; an error finishes the call.
  // Call: AutotuneCall or AutotuneStreamCall.
  template <typename Call>
  void StartAutotune(Call* call);
  // The worker's part of ExecuteBatch and Autotune: run (unless `status` says the work was
  // dropped), fill the response, finish the call.
  void RunBatch(BatchCall* call, const CallPlan& plan, const BatchItems& items,
                const BatchOptions& options, absl::Status status, int64_t queue_us) const;
  template <typename Call>
  void RunAutotune(Call* call, const CallPlan& plan, const TensorMap* inputs,
                   absl::Status status) const;
  // Admin calls that run on gRPC's thread: authenticate, parse, run `body` for the caller,
  // finish.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Admin(
      grpc::CallbackServerContext* context, const Raw* request, Raw* response,
      const std::function<absl::Status(const Caller&, const Request&, Response*)>& body);
  // The same, with `body` given the whole call (its tracker, the request's tensor buffers).
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(
      grpc::CallbackServerContext* context, const Raw* request, Raw* response,
      const std::function<absl::Status(UnaryCall<Request, Response>&)>& body);

  const ServiceDeps deps_;
};

template <typename Request, typename Response>
grpc::ServerUnaryReactor* KernelServiceImpl::Unary(
    grpc::CallbackServerContext* context, const Raw* request, Raw* response,
    const std::function<absl::Status(UnaryCall<Request, Response>&)>& body) {
  auto* call = new UnaryCall<Request, Response>(deps_.budget, deps_.metrics, context, request,
                                                response, /*record=*/false);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  call->Finish(RunGuarded([&]() -> absl::Status {
    KS_RETURN_IF_ERROR(Admit(deps_, call->tracker()));
    KS_RETURN_IF_ERROR(call->tracker().Hold(call->received_bytes(), "request"));
    KS_RETURN_IF_ERROR(call->Parse(deps_.host_allocator));
    return body(*call);
  }));
  return reactor;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* KernelServiceImpl::Admin(
    grpc::CallbackServerContext* context, const Raw* request, Raw* response,
    const std::function<absl::Status(const Caller&, const Request&, Response*)>& body) {
  return Unary<Request, Response>(
      context, request, response, [&body](UnaryCall<Request, Response>& call) {
        return body(call.tracker().caller(), call.request(), &call.response());
      });
}

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SERVICE_H_
