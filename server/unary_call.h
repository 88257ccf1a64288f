// UnaryCall: one unary RPC of the service on raw bytes, from arrival to answer.
#ifndef KERNELSERVE_SERVER_UNARY_CALL_H_
#define KERNELSERVE_SERVER_UNARY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/parse.h"
#include "server/call_tracker.h"
#include "server/status.h"

namespace kernelserve::server {

// The service's methods are registered raw (gRPC hands over the received bytes), so that
// bytes that do not parse get INVALID_ARGUMENT naming the fault, and each call parses its
// request only after taking its bytes from the in-flight budget. A handler creates a
// UnaryCall, which owns the parsed request and the response; Finish serializes the response
// into gRPC's buffer (a grpc::ByteBuffer response is sent as the handler wrote it), finishes
// the RPC and deletes the call.
// Thread safety: one thread at a time (the handler, then the worker that runs the call).
template <typename Request, typename Response>
class UnaryCall {
 public:
  // Borrows everything; gRPC keeps `context` and both buffers until Finish. `budget` and
  // `metrics` must outlive the call. `record` = count the call in the request metrics (kernel
  // calls; admin calls are not).
  UnaryCall(InflightBudget* budget, Metrics* metrics, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response, bool record)
      : tracker_(budget, metrics, context),
        reactor_(context->DefaultReactor()),
        // gRPC hands each call a request buffer of its own and only destroys it after the
        // call; ParseRequest clears it, so the received bytes are freed once parsed.
        raw_request_(const_cast<grpc::ByteBuffer*>(raw_request)),
        raw_response_(raw_response),
        record_(record) {}
  UnaryCall(const UnaryCall&) = delete;
  UnaryCall& operator=(const UnaryCall&) = delete;

  // Bytes received (before parsing).
  int64_t received_bytes() const { return static_cast<int64_t>(raw_request_->Length()); }
  // Parses the received bytes into request(); InvalidArgument naming the fault. The large
  // tensor bytes of an ExecuteRequest, CreateTensorRequest or WriteTensorRequest go into
  // buffers from `allocator` (nullable; listed in request_buffers()), those of a
  // ModelInferRequest's raw_input_contents too (listed in raw_input_buffers()). The time it
  // takes is recv_us().
  absl::Status Parse(HostAllocator* allocator = nullptr) {
    const auto started = std::chrono::steady_clock::now();
    absl::Status status;
    if constexpr (std::is_same_v<Request, v1::ExecuteRequest> ||
                  std::is_same_v<Request, v1::CreateTensorRequest> ||
                  std::is_same_v<Request, v1::WriteTensorRequest>) {
      status = wire::ParseRequest(raw_request_, &request_, allocator, &request_buffers_);
    } else if constexpr (std::is_same_v<Request, inference::ModelInferRequest>) {
      status = wire::ParseRequest(raw_request_, &request_, allocator, &raw_input_buffers_);
    } else {
      status = wire::ParseRequest(raw_request_, &request_);
    }
    recv_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count();
    return status;
  }

  // The status the client sees, recorded, then the RPC finished with it (with the serialized
  // response when OK); deletes this. Returns nothing: the call is gone.
  void Finish(const absl::Status& status) {
    absl::Status outcome = tracker_.Outcome(status);
    tracker_.ReleaseHold();
    int64_t sent = 0;
    if (outcome.ok()) {
      const grpc::Status serialized = Serialize();
      if (!serialized.ok()) {
        outcome = absl::InternalError(
            absl::StrCat("serializing the response: ", serialized.error_message()));
      }
      sent = static_cast<int64_t>(raw_response_->Length());
    }
    if (record_) tracker_.Record(outcome, sent);
    grpc::ServerUnaryReactor* reactor = reactor_;
    delete this;
    reactor->Finish(ToGrpcStatus(outcome));
  }

  Request& request() { return request_; }
  Response& response() { return response_; }
  // Buffers holding tensor bytes of request() (see Parse) and of response() (outputs put
  // there with PutTensor's buffer form; Finish sends them from the buffers).
  wire::TensorBuffers& request_buffers() { return request_buffers_; }
  wire::TensorBuffers& response_buffers() { return response_buffers_; }
  // Buffers holding raw_input_contents entries of a ModelInferRequest request() (see Parse).
  wire::RawBuffers& raw_input_buffers() { return raw_input_buffers_; }
  int64_t recv_us() const { return recv_us_; }
  CallTracker& tracker() { return tracker_; }
  grpc::CallbackServerContext* context() const { return tracker_.context(); }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

 private:
  ~UnaryCall() = default;

  grpc::Status Serialize() {
    if constexpr (std::is_same_v<Response, grpc::ByteBuffer>) {
      raw_response_->Swap(&response_);  // serialized by the handler
      return grpc::Status::OK;
    } else if constexpr (std::is_same_v<Response, v1::ExecuteResponse>) {
      if (!response_buffers_.empty()) {
        return wire::SerializeResponse(response_, response_buffers_, raw_response_);
      }
    }
    bool own_buffer = false;
    return grpc::SerializationTraits<Response>::Serialize(response_, raw_response_, &own_buffer);
  }

  CallTracker tracker_;
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const raw_request_;
  grpc::ByteBuffer* const raw_response_;
  const bool record_;
  Request request_;
  Response response_;
  wire::TensorBuffers request_buffers_;
  wire::TensorBuffers response_buffers_;
  wire::RawBuffers raw_input_buffers_;
  int64_t recv_us_ = 0;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_UNARY_CALL_H_
