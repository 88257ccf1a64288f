// Client::Health: grpc.health.v1.Health/Check through a generic stub. The two messages are
// tiny (HealthCheckRequest {string service = 1}, HealthCheckResponse {enum status = 1}), so
// they are encoded here by hand rather than generated.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/status_convert.h"
#include "core/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace kernelserve {
namespace {

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Reads a varint at `*pos`; false when the bytes end first.
bool ReadVarint(const std::string& bytes, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && *pos < bytes.size(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(bytes[(*pos)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The `status` field (1, varint) of a HealthCheckResponse; other fields are skipped.
absl::StatusOr<int> ParseHealthResponse(const std::string& bytes) {
  const absl::Status malformed = absl::InternalError("health: malformed HealthCheckResponse");
  int status = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t key = 0, value = 0;
    if (!ReadVarint(bytes, &pos, &key)) return malformed;
    switch (key & 7) {
      case 0:  // varint
        if (!ReadVarint(bytes, &pos, &value)) return malformed;
        if ((key >> 3) == 1) status = static_cast<int>(value);
        break;
      case 2:  // length-delimited
        if (!ReadVarint(bytes, &pos, &value) || value > bytes.size() - pos) return malformed;
        pos += value;
        break;
      default:
        return malformed;
    }
  }
  return status;
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
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes.push_back(0x0a);  // field 1, length-delimited
    AppendVarint(service.size(), &request_bytes);
    request_bytes += service;
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  if (options_.deadline != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  }
  grpc::GenericStub stub(channel_);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  KS_RETURN_IF_ERROR(FromGrpcStatus(status));
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
  }
  KS_ASSIGN_OR_RETURN(int code, ParseHealthResponse(bytes));
  if (code < 0 || code > 3) return HealthStatus::kUnknown;
  return static_cast<HealthStatus>(code);  // UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN
}

}  // namespace kernelserve
