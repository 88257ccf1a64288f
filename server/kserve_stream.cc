// ModelStreamInfer: the Open Inference Protocol's stream of ModelInfer calls
// (server/stream_reactor.h). Each answer is a ModelStreamInferResponse: the ModelInferResponse,
// or error_message with the request's id and model when the call failed.
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/kserve_convert.h"
#include "proto/parse.h"
#include "server/kserve_service.h"
#include "server/stream_reactor.h"

namespace kernelserve::server {
namespace {

struct KServeStream {
  using Reply = InferReply;

  static absl::Status Parse(const CallDeps& deps, const Caller& caller, grpc::ByteBuffer* read,
                            CallRequest* call, Reply* reply) {
    inference::ModelInferRequest infer;
    wire::RawBuffers raw_buffers;  // moved into call->buffers by PrepareInfer
    KS_RETURN_IF_ERROR(wire::ParseRequest(read, &infer, deps.host_allocator, &raw_buffers));
    return PrepareInfer(deps, caller, &infer, &raw_buffers, call, reply);
  }

  static std::chrono::system_clock::time_point Deadline(const Reply& reply) {
    return reply.deadline;
  }

  static constexpr bool kKeepBuffers = true;

  static absl::Status Serialize(v1::ExecuteResponse response, wire::TensorBuffers buffers,
                                absl::Status outcome, const Reply& reply, CallWaits waits,
                                grpc::ByteBuffer* out) {
    if (outcome.ok()) {
      response.mutable_timing()->set_queue_us(waits.queue_us);
      response.mutable_timing()->set_recv_us(waits.recv_us);
      absl::StatusOr<kserve::WireMessage> bytes = AnswerInfer(&response, reply, &buffers);
      if (bytes.ok()) {
        kserve::NestAs(inference::ModelStreamInferResponse::kInferResponseFieldNumber, &*bytes);
        *out = bytes->ToByteBuffer();
        return outcome;
      }
      outcome = bytes.status();
    }
    inference::ModelStreamInferResponse answer;
    answer.set_error_message(
        absl::StrCat(absl::StatusCodeToString(outcome.code()), ": ", ClientMessage(outcome)));
    answer.mutable_infer_response()->set_id(reply.id);
    answer.mutable_infer_response()->set_model_name(reply.model);
    bool own_buffer = false;
    const grpc::Status serialized =
        grpc::SerializationTraits<inference::ModelStreamInferResponse>::Serialize(answer, out,
                                                                                  &own_buffer);
    if (serialized.ok()) return outcome;
    outcome =
        absl::InternalError(absl::StrCat("serializing the response: ", serialized.error_message()));
    inference::ModelStreamInferResponse failed;
    failed.set_error_message(std::string(outcome.message()));
    failed.mutable_infer_response()->set_id(reply.id);
    (void)grpc::SerializationTraits<inference::ModelStreamInferResponse>::Serialize(failed, out,
                                                                                    &own_buffer);
    return outcome;
  }
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* InferenceServiceImpl::ModelStreamInfer(
    Context* context) {
  return new StreamReactor<KServeStream>(&deps_, context);
}

}  // namespace kernelserve::server
