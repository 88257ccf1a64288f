// Planning and running one kernel call for the handlers: params to attributes, platform and
// worker choice, the executor call, and the response.
#ifndef KERNELSERVE_SERVER_CALL_H_
#define KERNELSERVE_SERVER_CALL_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/executor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/convert.h"
#include "server/budget.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/worker_pool.h"

namespace kernelserve::server {

// What every handler shares. The pointers are borrowed from the Server, which outlives the
// service.
struct ServiceDeps {
  const Executor* executor = nullptr;      // REQUIRED
  WorkerPool* pool = nullptr;              // REQUIRED
  Metrics* metrics = nullptr;              // REQUIRED
  InflightBudget* budget = nullptr;        // REQUIRED
  const ServerOptions* options = nullptr;  // REQUIRED
  std::string auth_token;                  // "" = no authentication
  std::string store_location;              // for GetServerInfo ("memory (none)" without a store)
  bool built_with_cuda = false;            // for GetServerInfo
};

// The call-describing fields of a request (the messages repeat them).
struct CallParams {
  std::string kernel;
  const v1::MeanPoolingParams* mean_pooling = nullptr;        // borrowed; null = not given
  const v1::FlashAttentionParams* flash_attention = nullptr;  // borrowed; null = not given
  std::string platform;
  std::optional<int> device;
  PolicyPatch policy;
  TensorSpecMap specs;  // input shapes when known (auto routing looks at them); may be empty
};

// The CallParams of ExecuteRequest, ExecuteBatchRequest, AutotuneRequest, PutConfigRequest.
template <typename Request>
CallParams ParamsOf(const Request& request) {
  CallParams params;
  params.kernel = request.kernel();
  if (request.has_mean_pooling()) params.mean_pooling = &request.mean_pooling();
  if (request.has_flash_attention()) params.flash_attention = &request.flash_attention();
  params.platform = request.platform();
  if constexpr (requires { request.has_device(); }) {
    if (request.has_device()) params.device = request.device();
  }
  if constexpr (requires { request.policy(); }) params.policy = FromProto(request.policy());
  // Bad shapes are reported later, by the kernel's validation: routing just skips them. A
  // batch is routed by its first item, as its config is chosen.
  absl::StatusOr<TensorSpecMap> specs = absl::NotFoundError("no inputs");
  if constexpr (requires { request.inputs(); }) specs = SpecsFromProto(request.inputs());
  if constexpr (requires { request.items(); }) {
    if (!request.items().empty()) specs = SpecsFromProto(request.items(0).inputs());
  }
  if (specs.ok()) params.specs = *std::move(specs);
  return params;
}

// A call ready for a worker. A value type.
struct PlannedCall {
  const Kernel* kernel = nullptr;
  Attributes attrs;
  ExecuteOptions options;  // options.device is the chosen worker's device
  int worker = -1;         // the device whose worker runs it (-1 = the CPU)
  std::string platform;    // resolved platform name
};

// Finds the kernel, turns params into attributes, resolves the platform and picks the worker
// (the requested device, or the least loaded one of the platform). InvalidArgument for an
// unknown kernel, params of another kernel, or a device this server does not serve;
// Unimplemented for a platform the kernel lacks.
absl::StatusOr<PlannedCall> PlanCall(const Executor& executor, const WorkerPool& pool,
                                     const CallParams& params);

// "cpu" for -1, else "cuda:N".
std::string DeviceLabel(int device);
// Bytes of the tensors' data.
int64_t TensorBytes(const TensorMap& tensors);
// Bytes of the outputs `kernel` makes for inputs of `specs` (0 when they do not validate),
// saturating at INT64_MAX.
int64_t OutputBytes(const Kernel& kernel, const TensorSpecMap& specs, const Attributes& attrs);

// Moves `result` into `response` (outputs, config, source, device, timings but queue_us).
void FillResponse(ExecuteResult result, v1::ExecuteResponse* response);

// Runs `call` on `inputs` through the executor (on the calling worker thread), fills `response`
// and records the kernel, selection and tuning metrics.
absl::Status RunCall(const ServiceDeps& deps, const PlannedCall& call, const TensorMap& inputs,
                     v1::ExecuteResponse* response);

// Records a tuning outcome from a selection that tuned (or not).
void RecordSelection(Metrics& metrics, const std::string& kernel, ConfigSource source,
                     double select_seconds);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_CALL_H_
