// The shared-memory methods of the Open Inference Protocol over the server's
// SharedMemoryRegistry: the system methods see system regions only, the CUDA methods CUDA
// regions only, and each sees the caller's own regions only, admins' calls included (the
// protocol names no owner). Unregister of "" (every region of the kind of the caller's; Triton's
// tools send it before and after a run) always succeeds.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/kserve_service.h"
#include "server/pipeline.h"

namespace kernelserve::server {
namespace {

absl::Status NoRegistry() {
  return absl::UnimplementedError(
      "this server keeps no shared memory regions; send the tensor bytes in the request");
}

}  // namespace

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryStatus(
    Context* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return Answer(context, "SystemSharedMemoryStatus", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) {
      return request->name().empty() ? absl::OkStatus() : NoRegistry();
    }
    // At most --quota-shared-memory-regions entries of bounded names and keys.
    KS_ASSIGN_OR_RETURN(
        auto regions, deps_.shared_memory->List(caller, "", request->name(), RegionKind::kSystem));
    for (const auto& region : regions) {
      auto& status = (*response->mutable_regions())[region->name()];
      status.set_name(region->name());
      status.set_key(region->key());
      status.set_offset(region->offset());
      status.set_byte_size(region->byte_size());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryRegister(
    Context* context, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* /*response*/) {
  return Answer(context, "SystemSharedMemoryRegister", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) return NoRegistry();
    return deps_.shared_memory->RegisterSystem(CallerWithPeer(deps_, *context, caller),
                                               request->name(), request->key(), request->offset(),
                                               request->byte_size());
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryUnregister(
    Context* context, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* /*response*/) {
  return Answer(context, "SystemSharedMemoryUnregister", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) {
      return request->name().empty() ? absl::OkStatus() : NoRegistry();
    }
    return deps_.shared_memory->Unregister(caller, "", request->name(), RegionKind::kSystem);
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryStatus(
    Context* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  return Answer(context, "CudaSharedMemoryStatus", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) {
      return request->name().empty() ? absl::OkStatus() : NoRegistry();
    }
    KS_ASSIGN_OR_RETURN(auto regions,
                        deps_.shared_memory->List(caller, "", request->name(), RegionKind::kCuda));
    for (const auto& region : regions) {
      auto& status = (*response->mutable_regions())[region->name()];
      status.set_name(region->name());
      status.set_device_id(static_cast<uint64_t>(region->device()));
      status.set_byte_size(region->byte_size());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryRegister(
    Context* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse* /*response*/) {
  return Answer(context, "CudaSharedMemoryRegister", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) return NoRegistry();
    if (request->device_id() < 0 || request->device_id() > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("device_id ", request->device_id(), ": expected a GPU ordinal"));
    }
    return deps_.shared_memory->RegisterCuda(caller, request->name(), request->raw_handle(),
                                             static_cast<int>(request->device_id()),
                                             request->byte_size());
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryUnregister(
    Context* context, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* /*response*/) {
  return Answer(context, "CudaSharedMemoryUnregister", [&](const Caller& caller) -> absl::Status {
    if (deps_.shared_memory == nullptr) {
      return request->name().empty() ? absl::OkStatus() : NoRegistry();
    }
    return deps_.shared_memory->Unregister(caller, "", request->name(), RegionKind::kCuda);
  });
}

}  // namespace kernelserve::server
