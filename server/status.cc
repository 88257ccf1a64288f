#include "server/status.h"

#include <exception>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/utils/elide.h"

namespace kernelserve::server {

std::string ClientMessage(const absl::Status& status) {
  const absl::string_view message = status.message();
  const std::string_view text(message.data(), message.size());
  if (text.size() <= kMaxStatusMessageBytes) return std::string(text);
  // Elide's "...(N bytes)" takes at most 31 bytes (N has at most 20 digits).
  constexpr size_t kMarkerBytes = 31;
  return Elide(text, kMaxStatusMessageBytes - kMarkerBytes);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code.
  return grpc::Status(static_cast<grpc::StatusCode>(status.raw_code()), ClientMessage(status));
}

void ToRpcStatus(const absl::Status& status, v1::RpcStatus* out) {
  out->set_code(status.raw_code());
  out->set_message(ClientMessage(status));
}

absl::Status RunGuarded(absl::FunctionRef<absl::Status()> body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("the server ran out of host memory for this call");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the call failed with an exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("the call failed with an unknown exception");
  }
}

}  // namespace kernelserve::server
