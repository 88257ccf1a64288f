#include "client/status_convert.h"

namespace kernelserve {
namespace {

absl::Status Make(int code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  const int last = static_cast<int>(absl::StatusCode::kUnauthenticated);
  if (code < 0 || code > last) return absl::Status(absl::StatusCode::kUnknown, message);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return Make(static_cast<int>(status.error_code()), status.error_message());
}

absl::Status FromRpcStatus(const v1::RpcStatus& status) {
  return Make(status.code(), status.message());
}

}  // namespace kernelserve
