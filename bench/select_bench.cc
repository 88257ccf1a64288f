// Config selection and planning cost on the CPU (Google Benchmark): the chain answering from
// memory, the cache key it is given, and a whole plan (lookup, params, analysis, platform,
// device, key). Run: build/bench/kernelserve-select-bench
#include <benchmark/benchmark.h>

#include "core/executor.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "kernels/register.h"

namespace kernelserve {
namespace {

struct Setup {
  KernelRegistry registry;
  ConfigCache memory;
  ConfigSelectorChain chain{&memory, nullptr};
  Executor executor{&registry, &chain, /*gpus=*/{}};
  TensorSpecMap specs = {{"q", {DType::kBF16, {2, 128, 8, 64}}},
                         {"k", {DType::kBF16, {2, 256, 2, 64}}},
                         {"v", {DType::kBF16, {2, 256, 2, 64}}}};
  Attributes params = {{"causal", true}, {"return_lse", true}};
  CallPlan plan;

  Setup() {
    (void)RegisterBuiltinKernels(&registry);
    plan = *executor.Plan("flash_attention", specs, params);
  }

  SelectRequest Request() const {
    SelectRequest request;
    request.kernel = plan.kernel;
    request.impl = plan.impl;
    request.problem = plan.problem.get();
    request.invocation = &plan.invocation;
    request.cache_key = &plan.cache_key;
    request.device = plan.device;
    request.policy = plan.policy;
    return request;
  }
};

void BM_CacheKey(benchmark::State& state) {
  Setup s;
  for (auto _ : state) benchmark::DoNotOptimize(s.plan.invocation.CacheKey());
}
BENCHMARK(BM_CacheKey);

void BM_SelectMemoryHit(benchmark::State& state) {
  Setup s;
  const SelectRequest request = s.Request();
  (void)s.chain.Select(request);  // heuristic, written to memory
  for (auto _ : state) {
    absl::StatusOr<Selection> r = s.chain.Select(request);
    if (!r.ok() || r->source != ConfigSource::kMemory) state.SkipWithError("not a memory hit");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_SelectMemoryHit);

// The whole plan of a call, made once per request on gRPC's thread.
void BM_Plan(benchmark::State& state) {
  Setup s;
  for (auto _ : state) {
    absl::StatusOr<CallPlan> plan = s.executor.Plan("flash_attention", s.specs, s.params);
    if (!plan.ok()) state.SkipWithError("plan failed");
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_Plan);

}  // namespace
}  // namespace kernelserve

BENCHMARK_MAIN();
