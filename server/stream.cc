// ExecuteStream: kernelserve.v1's stream of Execute calls (server/stream_reactor.h), each answer
// echoing its request_id.
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/parse.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace kernelserve::server {
namespace {

struct NativeStream {
  struct Reply {
    std::string id;                        // request_id
    OutputSpans output_spans;              // the request's output_regions
    std::shared_ptr<CallRegions> regions;  // the regions the item holds; null = none
  };

  static absl::Status Parse(const ServiceDeps& deps, const Caller& /*caller*/,
                            grpc::ByteBuffer* read, v1::ExecuteRequest* request,
                            wire::TensorBuffers* buffers, Reply* reply) {
    KS_RETURN_IF_ERROR(wire::ParseRequest(read, request, deps.host_allocator, buffers));
    reply->id = request->request_id();
    return absl::OkStatus();
  }

  static absl::StatusOr<TensorMap> Resolve(const ServiceDeps& deps, const Caller& caller,
                                           const CallPlan& plan, v1::ExecuteRequest* request,
                                           Reply* reply) {
    KS_ASSIGN_OR_RETURN(RequestRegions regions,
                        TakeRequestRegions(deps.shared_memory, caller, plan, request));
    reply->output_spans = std::move(regions.outputs);
    reply->regions = std::move(regions.held);
    return std::move(regions.inputs);
  }

  static int64_t AnsweredOutputBytes(const CallPlan& plan, const Reply& reply) {
    return server::AnsweredOutputBytes(plan, &reply.output_spans);
  }

  static std::chrono::system_clock::time_point Deadline(const Reply& /*reply*/) {
    return std::chrono::system_clock::time_point::max();
  }

  static constexpr bool kKeepBuffers = true;

  static absl::Status Serialize(v1::ExecuteResponse response, wire::TensorBuffers buffers,
                                absl::Status outcome, const Reply& reply, StreamWaits waits,
                                grpc::ByteBuffer* out) {
    if (!outcome.ok()) {
      response.Clear();
      buffers.clear();
      ToRpcStatus(outcome, response.mutable_status());
    }
    response.set_request_id(reply.id);
    response.mutable_timing()->set_queue_us(waits.queue_us);
    response.mutable_timing()->set_recv_us(waits.recv_us);
    bool own_buffer = false;
    const grpc::Status serialized =
        buffers.empty()
            ? grpc::SerializationTraits<v1::ExecuteResponse>::Serialize(response, out, &own_buffer)
            : wire::SerializeResponse(response, buffers, out);
    if (serialized.ok()) return outcome;
    outcome =
        absl::InternalError(absl::StrCat("serializing the response: ", serialized.error_message()));
    v1::ExecuteResponse failed;
    failed.set_request_id(reply.id);
    ToRpcStatus(outcome, failed.mutable_status());
    (void)grpc::SerializationTraits<v1::ExecuteResponse>::Serialize(failed, out, &own_buffer);
    return outcome;
  }
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KernelServiceImpl::ExecuteStream(
    grpc::CallbackServerContext* context) {
  return new StreamReactor<NativeStream>(&deps_, context);
}

}  // namespace kernelserve::server
