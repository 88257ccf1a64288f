// Conversions from gRPC statuses (and the in-band RpcStatus of stream and batch items) to
// absl::Status. The two code spaces are the same canonical codes; messages are kept.
#ifndef KERNELSERVE_CLIENT_STATUS_CONVERT_H_
#define KERNELSERVE_CLIENT_STATUS_CONVERT_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve {

// Same code, same message. Codes outside the canonical range become kUnknown.
absl::Status FromGrpcStatus(const grpc::Status& status);
// An in-band item status; code 0 is OK.
absl::Status FromRpcStatus(const v1::RpcStatus& status);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_STATUS_CONVERT_H_
