// The shared-memory methods of the Open Inference Protocol. This server registers no regions
// yet: Register answers UNIMPLEMENTED (saying to send the bytes in the request), Status lists
// none, and Unregister of "" (every region; Triton's tools send it before and after a run)
// succeeds, while Unregister of a name answers NOT_FOUND.
#include "absl/strings/str_cat.h"
#include "server/kserve_service.h"

namespace kernelserve::server {
namespace {

absl::Status NotServed(const char* kind) {
  return absl::UnimplementedError(
      absl::StrCat(kind,
                   " shared memory is not served by this server yet; send the tensor "
                   "bytes in the request (raw_input_contents)"));
}

absl::Status Unregister(const char* kind, const std::string& name) {
  if (name.empty()) return absl::OkStatus();  // every region: there are none
  return absl::NotFoundError(
      absl::StrCat("no ", kind, " shared memory region '", name.substr(0, 64), "'"));
}

}  // namespace

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryStatus(
    Context* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* /*response*/) {
  return Answer(context, "SystemSharedMemoryStatus", [&] {
    return request->name().empty() ? absl::OkStatus() : Unregister("system", request->name());
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryRegister(
    Context* context, const inference::SystemSharedMemoryRegisterRequest* /*request*/,
    inference::SystemSharedMemoryRegisterResponse* /*response*/) {
  return Answer(context, "SystemSharedMemoryRegister", [] { return NotServed("system"); });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryUnregister(
    Context* context, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* /*response*/) {
  return Answer(context, "SystemSharedMemoryUnregister",
                [&] { return Unregister("system", request->name()); });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryStatus(
    Context* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* /*response*/) {
  return Answer(context, "CudaSharedMemoryStatus", [&] {
    return request->name().empty() ? absl::OkStatus() : Unregister("CUDA", request->name());
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryRegister(
    Context* context, const inference::CudaSharedMemoryRegisterRequest* /*request*/,
    inference::CudaSharedMemoryRegisterResponse* /*response*/) {
  return Answer(context, "CudaSharedMemoryRegister", [] { return NotServed("CUDA"); });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryUnregister(
    Context* context, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* /*response*/) {
  return Answer(context, "CudaSharedMemoryUnregister",
                [&] { return Unregister("CUDA", request->name()); });
}

}  // namespace kernelserve::server
