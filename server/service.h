// KernelServiceImpl: the kernelserve.v1.KernelService handlers on gRPC's callback API. Thin:
// each validates, converts, hands the work to a device worker and finishes the call.
#ifndef KERNELSERVE_SERVER_SERVICE_H_
#define KERNELSERVE_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kernelserve/v1/kernel_service.grpc.pb.h"
#include "server/call.h"

namespace kernelserve::server {

// Thread safety: thread-safe; gRPC calls the handlers from many threads.
class KernelServiceImpl final : public v1::KernelService::CallbackService {
 public:
  // `deps` pointers are borrowed and must outlive the service and every call it starts.
  explicit KernelServiceImpl(ServiceDeps deps) : deps_(std::move(deps)) {}

  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context,
                                    const v1::ExecuteRequest* request,
                                    v1::ExecuteResponse* response) override;
  grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>* ExecuteStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ExecuteBatch(grpc::CallbackServerContext* context,
                                         const v1::ExecuteBatchRequest* request,
                                         v1::ExecuteBatchResponse* response) override;
  grpc::ServerUnaryReactor* Autotune(grpc::CallbackServerContext* context,
                                     const v1::AutotuneRequest* request,
                                     v1::AutotuneResponse* response) override;
  grpc::ServerUnaryReactor* ListKernels(grpc::CallbackServerContext* context,
                                        const v1::ListKernelsRequest* request,
                                        v1::ListKernelsResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;
  grpc::ServerUnaryReactor* ListConfigs(grpc::CallbackServerContext* context,
                                        const v1::ListConfigsRequest* request,
                                        v1::ListConfigsResponse* response) override;
  grpc::ServerUnaryReactor* PutConfig(grpc::CallbackServerContext* context,
                                      const v1::PutConfigRequest* request,
                                      v1::PutConfigResponse* response) override;
  grpc::ServerUnaryReactor* DeleteConfig(grpc::CallbackServerContext* context,
                                         const v1::DeleteConfigRequest* request,
                                         v1::DeleteConfigResponse* response) override;

 private:
  using Clock = std::chrono::steady_clock;

  // OK when no token is configured or the call carries "authorization: Bearer <token>";
  // Unauthenticated otherwise. The compare takes the same time wherever the token differs.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;
  // Queues `run` on `device`'s worker under the in-flight byte budget; the budget is given
  // back after `run`. ResourceExhausted when the budget or the queue is full (run not called).
  // `may_run_inline`: see WorkItem::may_run_inline (run here when the CPU worker is idle).
  absl::Status Dispatch(grpc::CallbackServerContext* context, int device, int64_t bytes,
                        std::function<void(absl::Status status, int64_t queue_us)> run,
                        bool may_run_inline = false);
  // Records the request metrics and finishes `reactor` with `status`.
  void Finish(grpc::ServerUnaryReactor* reactor, const absl::Status& status,
              std::string_view kernel, std::string_view platform, Clock::time_point start,
              int64_t response_bytes);
  // Metric labels of a call, known as far as the call got.
  struct Labels {
    std::string kernel = "unknown";
    std::string platform = "unknown";
  };
  // The first steps of every kernel call: counts the received bytes, authorizes, plans the
  // call (kernel, attributes, platform, worker) and takes an explicit config from the request
  // when it has one. Fills `labels` as it goes, for the metrics of a call that fails here.
  template <typename Request>
  absl::StatusOr<PlannedCall> Begin(const grpc::CallbackServerContext& context,
                                    const Request& request, Labels* labels);
  // Admin calls that run on gRPC's thread: authorize, run `body`, finish.
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* context,
                                   const std::function<absl::Status()>& body);

  friend class StreamReactor;
  const ServiceDeps deps_;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SERVICE_H_
