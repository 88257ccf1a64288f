// The service's calls that answer from the server's state on gRPC's thread: ListKernels,
// GetServerInfo, ListConfigs, PutConfig and DeleteConfig.
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/build_info.h"
#include "server/device_memory.h"
#include "server/service.h"

namespace kernelserve::server {
namespace {

void AddDevice(const DeviceInfo& info, int queue_depth, v1::ServerInfo* out) {
  v1::DeviceStatus* device = out->add_devices();
  device->set_device(info.ordinal);
  device->set_platform(std::string(PlatformName(info.platform)));
  device->set_name(info.fingerprint.name);
  device->set_fingerprint(info.fingerprint.Hash());
  device->set_fingerprint_json(info.fingerprint.ToJson());
  device->set_memory_total_bytes(info.memory_total_bytes);
  if (absl::StatusOr<DeviceMemory> memory = QueryDeviceMemory(info.ordinal); memory.ok()) {
    device->set_memory_used_bytes(memory->used_bytes);
    device->set_memory_total_bytes(memory->total_bytes);
  }
  device->set_queue_depth(queue_depth);
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

void AddStored(const StoredConfig& stored, std::string_view tier, v1::ListConfigsResponse* out) {
  v1::ConfigEntry* entry = out->add_entries();
  entry->set_kernel(stored.kernel_id);
  entry->set_cache_key(stored.cache_key);
  entry->set_device_fingerprint(stored.fingerprint_hash);
  *entry->mutable_config() = ToProto(stored.config);
  entry->set_origin(stored.origin);
  entry->set_measured_us(stored.measured_seconds * 1e6);
  entry->set_host(stored.host);
  entry->set_stored_at_unix_ms(stored.stored_at_unix_ms);
  entry->set_tier(std::string(tier));
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::ListKernels(grpc::CallbackServerContext* context,
                                                         const Raw* raw_request,
                                                         Raw* raw_response) {
  using Request = v1::ListKernelsRequest;
  using Response = v1::ListKernelsResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [&](const Caller&, const Request&, Response* response) -> absl::Status {
        for (const Kernel* kernel : deps_.executor->registry().kernels()) {
          v1::KernelInfo* info = response->add_kernels();
          ToProto(kernel->schema(), info);
          info->set_id(kernel->id());
          for (Platform p : kernel->platforms()) {
            info->add_platforms(std::string(PlatformName(p)));
            v1::PlatformConfigInfo* schema = info->add_config_schemas();
            schema->set_platform(std::string(PlatformName(p)));
            for (const ConfigFieldSchema& field : kernel->impl(p)->config_schema().fields) {
              *schema->add_fields() = ToProto(field);
            }
          }
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const Raw* raw_request,
                                                           Raw* raw_response) {
  using Request = v1::GetServerInfoRequest;
  using Response = v1::ServerInfo;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [&](const Caller&, const Request&, Response* response) -> absl::Status {
        const Executor& executor = *deps_.executor;
        const BuildInfo& build = GetBuildInfo();
        response->set_version(build.version);
        response->set_git(build.git);
        response->set_cuda_version(build.cuda);
        AddDevice(executor.cpu(), deps_.pool->Depth(-1), response);
        for (const DeviceInfo& gpu : executor.gpus()) {
          if (deps_.pool->Owns(gpu.ordinal))
            AddDevice(gpu, deps_.pool->Depth(gpu.ordinal), response);
        }
        for (const char* tier : {"override", "overlay", "memory"}) response->add_cache_tiers(tier);
        if (PersistentStore* store = executor.chain().store()) {
          response->add_cache_tiers(std::string(store->name()));
        }
        response->set_store(deps_.store_location);
        const AutotunePolicy policy = executor.options().policy;
        response->set_allow_autotune(policy.allow_autotune);
        response->set_allow_heuristics(policy.allow_heuristics);
        response->set_persist(policy.persist);
        response->set_autotune_budget_ms(BudgetMillis(policy));
        response->set_max_message_bytes(deps_.options->max_message_bytes);
        response->set_max_queue(deps_.options->max_queue);
        response->set_max_inflight_bytes(deps_.options->max_inflight_bytes);
        response->set_built_with_cuda(deps_.built_with_cuda);
        response->set_cudnn_version(deps_.cudnn_version);
        response->set_host(HostName());
        const ServerOptions& options = *deps_.options;
        response->set_max_resident_bytes(static_cast<uint64_t>(options.max_resident_bytes));
        response->set_quota_resident_bytes(static_cast<uint64_t>(options.quota_resident_bytes));
        response->set_resident_ttl_seconds(
            static_cast<uint32_t>(absl::ToInt64Seconds(options.resident_ttl)));
        response->set_max_resident_ttl_seconds(
            static_cast<uint32_t>(absl::ToInt64Seconds(options.max_resident_ttl)));
        if (deps_.resident != nullptr) {
          response->set_resident_bytes(static_cast<uint64_t>(deps_.resident->bytes()));
          response->set_resident_tensors(deps_.resident->count());
        }
        response->set_started_unix_ms(absl::ToUnixMillis(deps_.started));
        if (deps_.shared_memory != nullptr) {
          if (deps_.shared_memory->system()) response->add_shared_memory("system");
          if (deps_.shared_memory->cuda()) response->add_shared_memory("cuda");
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::ListConfigs(grpc::CallbackServerContext* context,
                                                         const Raw* raw_request,
                                                         Raw* raw_response) {
  using Request = v1::ListConfigsRequest;
  using Response = v1::ListConfigsResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [&](const Caller&, const Request& request, Response* response) -> absl::Status {
        const std::string& filter = request.kernel();
        ConfigSelectorChain& chain = deps_.executor->chain();
        for (const auto& [key, config] : chain.memory()->Entries()) {
          if (!absl::StartsWith(key, filter)) continue;
          v1::ConfigEntry* entry = response->add_entries();
          entry->set_kernel(key.substr(0, key.find(':')));
          entry->set_cache_key(key);
          entry->set_device_fingerprint(chain.memory()->DeviceOf(key));
          *entry->mutable_config() = ToProto(config);
          entry->set_tier("memory");
        }
        PersistentStore* store = chain.store();
        if (store == nullptr) return absl::OkStatus();
        absl::StatusOr<std::vector<StoredConfig>> stored = store->List(filter);
        if (!stored.ok()) {
          deps_.metrics->StoreError(store->name(), "list");
          return absl::OkStatus();  // the memory tier still answers
        }
        for (const StoredConfig& s : *stored) AddStored(s, store->name(), response);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::PutConfig(grpc::CallbackServerContext* context,
                                                       const Raw* raw_request, Raw* raw_response) {
  using Request = v1::PutConfigRequest;
  using Response = v1::PutConfigResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [&](const Caller& caller, const Request& request, Response* response) -> absl::Status {
        KS_RETURN_IF_ERROR(RequireAdmin(caller, "PutConfig"));
        const Executor& executor = *deps_.executor;
        KS_ASSIGN_OR_RETURN(const CallParams params, ParamsOf(request));
        KS_ASSIGN_OR_RETURN(const CallPlan plan, PlanCall(executor, *deps_.pool, params));
        KS_RETURN_IF_ERROR(executor.Pin(plan, FromProto(request.config())));
        response->set_cache_key(plan.cache_key);
        response->set_device_fingerprint(plan.invocation.device.Hash());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::DeleteConfig(grpc::CallbackServerContext* context,
                                                          const Raw* raw_request,
                                                          Raw* raw_response) {
  using Request = v1::DeleteConfigRequest;
  using Response = v1::DeleteConfigResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [&](const Caller& caller, const Request& request, Response*) -> absl::Status {
        KS_RETURN_IF_ERROR(RequireAdmin(caller, "DeleteConfig"));
        if (request.cache_key().empty()) {
          return absl::InvalidArgumentError(
              "cache_key: expected a key as ListConfigs shows it (kernel@vN:hash)");
        }
        const Executor& executor = *deps_.executor;
        std::string fingerprint = request.device_fingerprint();
        if (fingerprint.empty()) {
          fingerprint = executor.gpus().empty() ? executor.cpu().fingerprint.Hash()
                                                : executor.gpus().front().fingerprint.Hash();
        }
        return executor.chain().Forget(fingerprint, request.cache_key());
      });
}

}  // namespace kernelserve::server
