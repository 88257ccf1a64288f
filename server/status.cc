#include "server/status.h"

#include <string>

namespace kernelserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code.
  return grpc::Status(static_cast<grpc::StatusCode>(status.raw_code()),
                      std::string(status.message()));
}

}  // namespace kernelserve::server
