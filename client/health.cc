// Client::Health: grpc.health.v1.Health/Check through the stubs generated from
// proto/grpc/health/v1/health.proto.
#include <string>

#include "client/client.h"
#include "client/status_convert.h"
#include "core/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace kernelserve {
namespace {

using grpc::health::v1::HealthCheckResponse;

HealthStatus FromProto(HealthCheckResponse::ServingStatus status) {
  switch (status) {
    case HealthCheckResponse::SERVING:
      return HealthStatus::kServing;
    case HealthCheckResponse::NOT_SERVING:
      return HealthStatus::kNotServing;
    case HealthCheckResponse::SERVICE_UNKNOWN:
      return HealthStatus::kServiceUnknown;
    default:  // UNKNOWN, or a value newer than this client
      return HealthStatus::kUnknown;
  }
}

}  // namespace

std::string_view HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kServing:
      return "SERVING";
    case HealthStatus::kNotServing:
      return "NOT_SERVING";
    case HealthStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case HealthStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& service) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::ClientContext context;
  if (options_.deadline != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  }
  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel_);
  KS_RETURN_IF_ERROR(FromGrpcStatus(stub->Check(&context, request, &response)));
  return FromProto(response.status());
}

}  // namespace kernelserve
