// Config selection cost on the CPU (Google Benchmark): the chain answering from memory, and the
// cache key it computes first. Run: build/bench/kernelserve-select-bench
#include <benchmark/benchmark.h>

#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "kernels/register.h"

namespace kernelserve {
namespace {

struct Setup {
  KernelRegistry registry;
  ConfigCache memory;
  ConfigSelectorChain chain{&memory, nullptr};
  DeviceInfo cpu = CpuDeviceInfo();
  Invocation invocation;
  const Kernel* kernel = nullptr;

  Setup() {
    (void)RegisterBuiltinKernels(&registry);
    kernel = *registry.Find("flash_attention");
    invocation.kernel_id = kernel->id();
    invocation.inputs = {{"q", {DType::kBF16, {2, 128, 8, 64}}},
                         {"k", {DType::kBF16, {2, 256, 2, 64}}},
                         {"v", {DType::kBF16, {2, 256, 2, 64}}}};
    invocation.attributes = {{"causal", true}, {"return_lse", true}};
    invocation.platform = "cpu";
    invocation.device = cpu.fingerprint;
  }
};

void BM_CacheKey(benchmark::State& state) {
  Setup s;
  for (auto _ : state) benchmark::DoNotOptimize(s.invocation.CacheKey());
}
BENCHMARK(BM_CacheKey);

void BM_SelectMemoryHit(benchmark::State& state) {
  Setup s;
  SelectRequest request;
  request.kernel = s.kernel;
  request.invocation = &s.invocation;
  request.device = &s.cpu;
  (void)s.chain.Select(request);  // heuristic, written to memory
  for (auto _ : state) {
    absl::StatusOr<Selection> r = s.chain.Select(request);
    if (!r.ok() || r->source != ConfigSource::kMemory) state.SkipWithError("not a memory hit");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_SelectMemoryHit);

}  // namespace
}  // namespace kernelserve

BENCHMARK_MAIN();
