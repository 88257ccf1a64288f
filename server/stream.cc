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
    std::string id;  // request_id
  };

  static absl::Status Parse(const CallDeps& deps, const Caller& /*caller*/, grpc::ByteBuffer* read,
                            CallRequest* call, Reply* reply) {
    KS_RETURN_IF_ERROR(wire::ParseRequest(read, call->request, deps.host_allocator, call->buffers));
    reply->id = call->request->request_id();
    call->regions = RegionRefsOf(*call->request);
    return absl::OkStatus();
  }

  static std::chrono::system_clock::time_point Deadline(const Reply& /*reply*/) {
    return std::chrono::system_clock::time_point::max();
  }

  static constexpr bool kKeepBuffers = true;

  static absl::Status Serialize(v1::ExecuteResponse response, wire::TensorBuffers buffers,
                                absl::Status outcome, const Reply& reply, CallWaits waits,
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
