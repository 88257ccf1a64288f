#include "server/call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::server {
namespace {

absl::StatusOr<Attributes> AttributesOf(const Kernel& kernel, const CallParams& params) {
  if (params.mean_pooling != nullptr) {
    if (kernel.name() != "mean_pooling") {
      return absl::InvalidArgumentError(
          absl::StrCat("params: mean_pooling params given for kernel '", kernel.name(),
                       "': expected flash_attention params or none"));
    }
    return MeanPoolingAttributes(*params.mean_pooling);
  }
  if (params.flash_attention != nullptr) {
    if (kernel.name() != "flash_attention") {
      return absl::InvalidArgumentError(
          absl::StrCat("params: flash_attention params given for kernel '", kernel.name(),
                       "': expected mean_pooling params or none"));
    }
    return FlashAttentionAttributes(*params.flash_attention);
  }
  return Attributes{};
}

// The GPU ordinals among the pool's devices.
std::vector<int> GpuWorkers(const WorkerPool& pool) {
  std::vector<int> gpus;
  for (int device : pool.devices()) {
    if (device >= 0) gpus.push_back(device);
  }
  return gpus;
}

}  // namespace

absl::StatusOr<PlannedCall> PlanCall(const Executor& executor, const WorkerPool& pool,
                                     const CallParams& params) {
  PlannedCall call;
  KS_ASSIGN_OR_RETURN(call.kernel, executor.registry().Find(params.kernel));
  KS_ASSIGN_OR_RETURN(call.attrs, AttributesOf(*call.kernel, params));
  ExecuteOptions route;
  route.platform = params.platform;
  route.device = params.device;
  KS_ASSIGN_OR_RETURN(const Platform platform,
                      executor.ChoosePlatform(*call.kernel, params.specs, call.attrs, route,
                                              !GpuWorkers(pool).empty()));
  call.platform = std::string(PlatformName(platform));
  call.options.platform = call.platform;
  call.options.policy = params.policy;
  if (platform == Platform::kCpu) {
    if (params.device.has_value() && *params.device != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", *params.device, " is a GPU but the call runs on the cpu"));
    }
    call.worker = -1;
  } else if (params.device.has_value()) {
    if (*params.device < 0 || !pool.Owns(*params.device)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", *params.device, " is not a GPU this server serves"));
    }
    call.worker = *params.device;
  } else {
    const std::vector<int> gpus = GpuWorkers(pool);
    if (gpus.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "platform '", call.platform, "': this server serves no GPU (expected cpu or auto)"));
    }
    call.worker = pool.LeastLoaded(gpus);
  }
  call.options.device = call.worker;
  return call;
}

std::string DeviceLabel(int device) {
  return device < 0 ? std::string("cpu") : absl::StrCat("cuda:", device);
}

int64_t TensorBytes(const TensorMap& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += static_cast<int64_t>(tensor.nbytes());
  return bytes;
}

int64_t OutputBytes(const Kernel& kernel, const TensorSpecMap& specs, const Attributes& attrs) {
  if (!kernel.Validate(specs, attrs).ok()) return 0;
  int64_t total = 0;
  for (const auto& [name, spec] : kernel.OutputSpecs(specs, attrs)) {
    const int64_t bytes = NumElements(spec.shape).value_or(INT64_MAX / 8) *
                          static_cast<int64_t>(ItemSize(spec.dtype));
    if (__builtin_add_overflow(total, bytes, &total)) return INT64_MAX;
  }
  return total;
}

void FillResponse(ExecuteResult result, v1::ExecuteResponse* response) {
  for (auto& [name, tensor] : result.outputs) {
    PutTensor(std::move(tensor), &(*response->mutable_outputs())[name]);
  }
  *response->mutable_config() = ToProto(result.config);
  response->set_config_source(ToProto(result.source));
  response->set_platform(std::string(PlatformName(result.platform)));
  response->set_device(result.device);
  response->set_device_fingerprint(std::move(result.device_fingerprint));
  response->set_cache_key(std::move(result.cache_key));
  ToProto(result.timings, response->mutable_timing());
  for (std::string& warning : result.warnings) response->add_warnings(std::move(warning));
}

void RecordSelection(Metrics& metrics, const std::string& kernel, ConfigSource source,
                     double select_seconds) {
  metrics.ConfigSelection(kernel, ConfigSourceName(source));
  if (source == ConfigSource::kAutotune) metrics.AutotuneRun(kernel, "ok", select_seconds);
}

absl::Status RunCall(const ServiceDeps& deps, const PlannedCall& call, const TensorMap& inputs,
                     v1::ExecuteResponse* response) {
  KS_ASSIGN_OR_RETURN(ExecuteResult result, deps.executor->Execute(call.kernel->name(), inputs,
                                                                   call.attrs, call.options));
  const std::string kernel = call.kernel->name();
  deps.metrics->KernelRun(kernel, call.platform, DeviceLabel(result.device),
                          static_cast<double>(result.timings.kernel_us) * 1e-6);
  RecordSelection(*deps.metrics, kernel, result.source,
                  static_cast<double>(result.timings.select_us) * 1e-6);
  FillResponse(std::move(result), response);
  return absl::OkStatus();
}

}  // namespace kernelserve::server
