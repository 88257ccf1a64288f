// The service's shared-memory calls, over the server's SharedMemoryRegistry: they answer on
// gRPC's thread like the config calls. Each acts on the caller's own regions unless an admin
// names another owner.
#include "core/status_macros.h"
#include "server/service.h"

namespace kernelserve::server {
namespace {

absl::Status NoRegistry() {
  return absl::UnimplementedError(
      "this server keeps no shared memory regions; send the tensor bytes in the request");
}

void ToProto(const SharedRegion& region, v1::SharedMemoryRegion* out) {
  out->set_name(region.name());
  out->set_owner(region.owner());
  out->set_kind(region.device() >= 0 ? "cuda" : "system");
  out->set_device(region.device());
  out->set_key(region.key());
  out->set_offset(region.offset());
  out->set_byte_size(region.byte_size());
  out->set_in_use(region.calls());
  out->set_pinned(region.pinned());
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::RegisterSystemSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::RegisterSystemSharedMemoryRequest;
  using Response = v1::RegisterSharedMemoryResponse;
  return Admin<Request, Response>(context, raw_request, raw_response,
                                  [this, context](const Caller& caller, const Request& request,
                                                  Response* /*response*/) -> absl::Status {
                                    if (deps_.shared_memory == nullptr) return NoRegistry();
                                    return deps_.shared_memory->RegisterSystem(
                                        CallerWithPeer(deps_, *context, caller), request.name(),
                                        request.key(), request.offset(), request.byte_size());
                                  });
}

grpc::ServerUnaryReactor* KernelServiceImpl::RegisterCudaSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::RegisterCudaSharedMemoryRequest;
  using Response = v1::RegisterSharedMemoryResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& caller, const Request& request, Response* /*response*/) -> absl::Status {
        if (deps_.shared_memory == nullptr) return NoRegistry();
        return deps_.shared_memory->RegisterCuda(caller, request.name(), request.raw_handle(),
                                                 request.device(), request.byte_size());
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::UnregisterSharedMemoryRequest;
  using Response = v1::UnregisterSharedMemoryResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& caller, const Request& request, Response* /*response*/) -> absl::Status {
        if (deps_.shared_memory == nullptr) {
          return request.name().empty() ? absl::OkStatus() : NoRegistry();
        }
        return deps_.shared_memory->Unregister(caller, request.owner(), request.name());
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::SharedMemoryStatusRequest;
  using Response = v1::SharedMemoryStatusResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& caller, const Request& request, Response* response) -> absl::Status {
        if (deps_.shared_memory == nullptr) {
          return request.name().empty() ? absl::OkStatus() : NoRegistry();
        }
        // At most --max-shared-memory-regions entries of bounded names, keys and owners.
        KS_ASSIGN_OR_RETURN(auto regions,
                            deps_.shared_memory->List(caller, request.owner(), request.name()));
        for (const auto& region : regions) ToProto(*region, response->add_regions());
        return absl::OkStatus();
      });
}

}  // namespace kernelserve::server
