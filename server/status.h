// The one conversion from absl::Status to grpc::Status used by every handler.
#ifndef KERNELSERVE_SERVER_STATUS_H_
#define KERNELSERVE_SERVER_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kernelserve::server {

// Same code (the two enums share their numbering), same message. Thread-safe.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_STATUS_H_
