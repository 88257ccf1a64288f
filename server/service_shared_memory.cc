// The service's shared-memory calls, over the server's SharedMemoryRegistry: they answer on
// gRPC's thread like the config calls.
#include "core/status_macros.h"
#include "server/service.h"

namespace kernelserve::server {
namespace {

absl::Status NoRegistry() {
  return absl::UnimplementedError(
      "this server keeps no shared memory regions; send the tensor bytes in the request");
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::RegisterSystemSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::RegisterSystemSharedMemoryRequest;
  using Response = v1::RegisterSharedMemoryResponse;
  return Admin<Request, Response>(context, raw_request, raw_response,
                                  [this](const Caller& /*caller*/, const Request& request,
                                         Response* /*response*/) -> absl::Status {
                                    if (deps_.shared_memory == nullptr) return NoRegistry();
                                    return deps_.shared_memory->RegisterSystem(
                                        request.name(), request.key(), request.offset(),
                                        request.byte_size());
                                  });
}

grpc::ServerUnaryReactor* KernelServiceImpl::RegisterCudaSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::RegisterCudaSharedMemoryRequest;
  using Response = v1::RegisterSharedMemoryResponse;
  return Admin<Request, Response>(context, raw_request, raw_response,
                                  [this](const Caller& /*caller*/, const Request& request,
                                         Response* /*response*/) -> absl::Status {
                                    if (deps_.shared_memory == nullptr) return NoRegistry();
                                    return deps_.shared_memory->RegisterCuda(
                                        request.name(), request.raw_handle(), request.device(),
                                        request.byte_size());
                                  });
}

grpc::ServerUnaryReactor* KernelServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::UnregisterSharedMemoryRequest;
  using Response = v1::UnregisterSharedMemoryResponse;
  return Admin<Request, Response>(context, raw_request, raw_response,
                                  [this](const Caller& /*caller*/, const Request& request,
                                         Response* /*response*/) -> absl::Status {
                                    if (deps_.shared_memory == nullptr) {
                                      return request.name().empty() ? absl::OkStatus()
                                                                    : NoRegistry();
                                    }
                                    return deps_.shared_memory->Unregister(request.name());
                                  });
}

grpc::ServerUnaryReactor* KernelServiceImpl::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const Raw* raw_request, Raw* raw_response) {
  using Request = v1::SharedMemoryStatusRequest;
  using Response = v1::SharedMemoryStatusResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& /*caller*/, const Request& request, Response* response) -> absl::Status {
        if (deps_.shared_memory == nullptr) {
          return request.name().empty() ? absl::OkStatus() : NoRegistry();
        }
        KS_ASSIGN_OR_RETURN(auto regions, deps_.shared_memory->List(request.name()));
        for (const auto& region : regions) {
          v1::SharedMemoryRegion* out = response->add_regions();
          out->set_name(region->name());
          out->set_kind(region->device() >= 0 ? "cuda" : "system");
          out->set_device(region->device());
          out->set_key(region->key());
          out->set_offset(region->offset());
          out->set_byte_size(region->byte_size());
          // The registry's list and this copy hold it besides the calls.
          out->set_in_use(static_cast<int32_t>(std::max<long>(region.use_count() - 2, 0)));
        }
        return absl::OkStatus();
      });
}

}  // namespace kernelserve::server
