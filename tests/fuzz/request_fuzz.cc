// request_fuzz: one whole Execute call as the server makes it, on the CPU: the bytes parsed
// as a v1::ExecuteRequest, its fields converted by server::ParamsOf, the call planned by
// server::PlanCall (kernel, canonical params, analysis, platform, device, the request's config
// as an override), the tensors taken by TakeTensors, then Executor::Run (the override checked
// against the platform's limits, or the heuristic; prepare, launch, fetch) with an in-memory
// config cache, no persistent store and no autotuning. Must never crash, hang or allocate
// much. A call that runs with the request's config ran it as given, and its algorithm string
// was empty or a candidate's (CheckOverride).
//
// Budgets as the server's in-flight budget would apply them: requests whose tensors declare
// more than kMaxRequestBytes are skipped, and so are calls whose outputs would (OutputBytes).
// Empty tensors pass whatever their other dims: they carry no bytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/executor.h"
#include "core/registry.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "kernels/register.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/convert.h"
#include "server/call.h"
#include "server/worker_pool.h"

namespace kernelserve {
namespace {

constexpr int64_t kMaxRequestBytes = int64_t{64} << 10;

// What a CPU-only server holds: kernels, an in-memory cache, the chain, the executor, and a
// pool with the CPU worker (only asked for planning; nothing is submitted to it).
struct Server {
  KernelRegistry registry;
  ConfigCache memory{1024};
  ConfigSelectorChain chain{&memory, /*store=*/nullptr};
  std::unique_ptr<Executor> executor;
  server::WorkerPool pool{{-1}};

  Server() {
    if (!RegisterBuiltinKernels(&registry).ok()) std::abort();
    executor = std::make_unique<Executor>(&registry, &chain, std::vector<DeviceInfo>{});
  }
};

// Bytes the request's tensors declare (prod(shape) * itemsize), as TakeTensors will check
// them; -1 when a shape is refused there anyway or passes the budget.
int64_t DeclaredBytes(const v1::ExecuteRequest& request) {
  int64_t total = 0;
  for (const auto& [name, tensor] : request.inputs()) {
    absl::StatusOr<TensorSpec> spec = SpecFromProto(tensor, name);
    if (!spec.ok()) return -1;
    total += NumElements(spec->shape).value() * static_cast<int64_t>(ItemSize(spec->dtype));
    if (total > kMaxRequestBytes) return -1;
  }
  return total;
}

// A call that ran with the request's config: the chain took the override as it is, and its
// algorithm (client text) is empty or a candidate's.
void CheckOverride(const CallPlan& plan, const KernelConfig& override,
                   const ExecuteResult& result) {
  if (result.source != ConfigSource::kOverride || result.config != override) {
    std::fprintf(stderr, "request_fuzz: ran {%s} for the override {%s}\n",
                 result.config.DebugString().c_str(), override.DebugString().c_str());
    std::abort();
  }
  const std::vector<KernelConfig> candidates = plan.impl->Candidates(*plan.problem, *plan.device);
  for (std::string KernelConfig::*field : {&KernelConfig::algorithm}) {
    if ((override.*field).empty()) continue;
    if (std::none_of(candidates.begin(), candidates.end(),
                     [&](const KernelConfig& c) { return c.*field == override.*field; })) {
      std::fprintf(stderr, "request_fuzz: an override with a variant no candidate has ran: {%s}\n",
                   override.DebugString().c_str());
      std::abort();
    }
  }
}

void Run(Server& server, v1::ExecuteRequest& request) {
  if (DeclaredBytes(request) < 0) return;
  absl::StatusOr<server::CallParams> params = server::ParamsOf(request);
  if (!params.ok()) return;
  ExecuteOptions options;
  if (IsSet(request.config())) options.config = FromProto(request.config());
  absl::StatusOr<CallPlan> plan = server::PlanCall(*server.executor, server.pool, *params, options);
  if (!plan.ok()) return;
  plan->policy.allow_autotune = false;
  absl::StatusOr<TensorMap> inputs = TakeTensors(request.mutable_inputs());
  if (!inputs.ok() || server::OutputBytes(*plan) > kMaxRequestBytes) return;
  absl::StatusOr<ExecuteResult> result = server.executor->Run(*plan, *inputs);
  if (result.ok() && options.config) CheckOverride(*plan, *options.config, *result);
}

}  // namespace
}  // namespace kernelserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kernelserve::Server* const server = new kernelserve::Server();
  kernelserve::v1::ExecuteRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  kernelserve::Run(*server, request);
  return 0;
}
