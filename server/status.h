// The one conversion from absl::Status to what a client sees (a grpc::Status, or an in-band
// v1::RpcStatus of a batch or stream item), and the guard that keeps exceptions from crossing
// into gRPC's or a worker's thread.
#ifndef KERNELSERVE_SERVER_STATUS_H_
#define KERNELSERVE_SERVER_STATUS_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::server {

// The longest message a client is sent. gRPC puts the message into a trailer, and an oversized
// trailer fails the call with RESOURCE_EXHAUSTED and can upset other calls on the connection.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// The status's message, cut so that it and the mark of the cut ("...(N bytes)") take at most
// kMaxStatusMessageBytes (at a UTF-8 boundary).
std::string ClientMessage(const absl::Status& status);

// Same code (the two enums share their numbering), ClientMessage. Thread-safe.
grpc::Status ToGrpcStatus(const absl::Status& status);
// The in-band form for one item of a batch or a stream.
void ToRpcStatus(const absl::Status& status, v1::RpcStatus* out);

// Runs `body` and returns its status; an exception it throws becomes a status instead of
// leaving the thread: std::bad_alloc -> ResourceExhausted, any other -> Internal with its
// what(). Every handler and worker body runs under it.
absl::Status RunGuarded(absl::FunctionRef<absl::Status()> body);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_STATUS_H_
