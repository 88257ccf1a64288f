// InferenceServiceImpl: the Open Inference Protocol (KServe v2, inference.GRPCInferenceService)
// on the same listener as kernelserve.v1, so that Triton's clients and tools call kernels as
// models. Thin: each method admits the caller and converts (proto/kserve_convert.h); ModelInfer
// and ModelStreamInfer are adapters over the call pipeline (server/pipeline.h), with the same
// steps, limits, metrics and workers as the native service. One model per kernel, named as the
// kernel, version "1".
#ifndef KERNELSERVE_SERVER_KSERVE_SERVICE_H_
#define KERNELSERVE_SERVER_KSERVE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/kserve_convert.h"
#include "server/call.h"
#include "server/identity.h"
#include "server/pipeline.h"
#include "server/service_deps.h"

namespace kernelserve::server {

// ModelInfer and ModelStreamInfer are registered raw, like the native kernel calls (their bytes
// are taken from the in-flight budget before they are parsed); the other methods are typed.
namespace kserve_internal {
using G = inference::GRPCInferenceService;
using TypedMethods = G::WithCallbackMethod_ServerLive<G::WithCallbackMethod_ServerReady<
    G::WithCallbackMethod_ModelReady<G::WithCallbackMethod_ServerMetadata<
        G::WithCallbackMethod_ModelMetadata<G::WithCallbackMethod_ModelConfig<
            G::WithCallbackMethod_ModelStatistics<G::WithCallbackMethod_RepositoryIndex<
                G::WithCallbackMethod_SystemSharedMemoryStatus<
                    G::WithCallbackMethod_SystemSharedMemoryRegister<
                        G::WithCallbackMethod_SystemSharedMemoryUnregister<
                            G::WithCallbackMethod_CudaSharedMemoryStatus<
                                G::WithCallbackMethod_CudaSharedMemoryRegister<
                                    G::WithCallbackMethod_CudaSharedMemoryUnregister<
                                        G::Service>>>>>>>>>>>>>>;
}  // namespace kserve_internal
using KServeService = kserve_internal::G::WithRawCallbackMethod_ModelInfer<
    kserve_internal::G::WithRawCallbackMethod_ModelStreamInfer<kserve_internal::TypedMethods>>;

// Thread safety: thread-safe; gRPC calls the handlers from many threads.
class InferenceServiceImpl final : public KServeService {
 public:
  // `deps` pointers are borrowed and must outlive the service and every call it starts.
  explicit InferenceServiceImpl(ServiceDeps deps) : deps_(std::move(deps)) {}

  using Context = grpc::CallbackServerContext;
  using Reactor = grpc::ServerUnaryReactor;
  Reactor* ServerLive(Context* context, const inference::ServerLiveRequest* request,
                      inference::ServerLiveResponse* response) override;
  Reactor* ServerReady(Context* context, const inference::ServerReadyRequest* request,
                       inference::ServerReadyResponse* response) override;
  Reactor* ModelReady(Context* context, const inference::ModelReadyRequest* request,
                      inference::ModelReadyResponse* response) override;
  Reactor* ServerMetadata(Context* context, const inference::ServerMetadataRequest* request,
                          inference::ServerMetadataResponse* response) override;
  Reactor* ModelMetadata(Context* context, const inference::ModelMetadataRequest* request,
                         inference::ModelMetadataResponse* response) override;
  Reactor* ModelConfig(Context* context, const inference::ModelConfigRequest* request,
                       inference::ModelConfigResponse* response) override;
  Reactor* ModelStatistics(Context* context, const inference::ModelStatisticsRequest* request,
                           inference::ModelStatisticsResponse* response) override;
  Reactor* RepositoryIndex(Context* context, const inference::RepositoryIndexRequest* request,
                           inference::RepositoryIndexResponse* response) override;
  Reactor* SystemSharedMemoryStatus(Context* context,
                                    const inference::SystemSharedMemoryStatusRequest* request,
                                    inference::SystemSharedMemoryStatusResponse* response) override;
  Reactor* SystemSharedMemoryRegister(
      Context* context, const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  Reactor* SystemSharedMemoryUnregister(
      Context* context, const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  Reactor* CudaSharedMemoryStatus(Context* context,
                                  const inference::CudaSharedMemoryStatusRequest* request,
                                  inference::CudaSharedMemoryStatusResponse* response) override;
  Reactor* CudaSharedMemoryRegister(Context* context,
                                    const inference::CudaSharedMemoryRegisterRequest* request,
                                    inference::CudaSharedMemoryRegisterResponse* response) override;
  Reactor* CudaSharedMemoryUnregister(
      Context* context, const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

  Reactor* ModelInfer(Context* context, const grpc::ByteBuffer* request,
                      grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      Context* context) override;

 private:
  // Admits the call (Admit), runs `body` for the caller on this (gRPC's) thread, counts the call
  // under `method` and finishes it.
  Reactor* Answer(Context* context, const char* method,
                  const std::function<absl::Status(const Caller&)>& body);

  const ServiceDeps deps_;
};

// What answering a ModelInferRequest needs once its bytes went into the native request.
// A value type.
struct InferReply {
  const KernelSchema* schema = nullptr;  // the model's kernel; null until known
  std::string id;
  std::string model;                 // as the request named it
  std::vector<std::string> outputs;  // asked for; empty = all produced
  // The call's `timeout` parameter as a deadline (max = none).
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  RegionRefs output_regions;  // outputs written into shared memory (answered without data)
};

// The pipeline's CallRequest of `request` (its bytes moved into *call->request, its region
// refs and the outputs it asks for) and its InferReply, the call placed on the GPU of the
// caller's CUDA regions it names: NotFound for an unknown model or version, InvalidArgument
// (kserve::FromInferRequest) for the rest. The raw_input_contents entries that `raw_buffers`
// (nullable; from the parse) holds go into *call->buffers (REQUIRED then) under their native
// tensors, so that the inputs are the parser's buffers, not copies.
absl::Status PrepareInfer(const CallDeps& deps, const Caller& caller,
                          inference::ModelInferRequest* request,
                          const wire::RawBuffers* raw_buffers, CallRequest* call,
                          InferReply* reply);

// The answer of a call that ran (its outputs of reply.output_regions written there by Run):
// kserve::ToInferResponse, the serialized ModelInferResponse; outputs that Run left in
// `buffers` (nullable) are sent from them.
absl::StatusOr<kserve::WireMessage> AnswerInfer(v1::ExecuteResponse* answer,
                                                const InferReply& reply,
                                                const wire::TensorBuffers* buffers = nullptr);

// The kernel serving model `name` at `version` ("" or "1"); NotFound naming the models there
// are otherwise.
absl::StatusOr<const Kernel*> FindModel(const Executor& executor, std::string_view name,
                                        std::string_view version);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_KSERVE_SERVICE_H_
