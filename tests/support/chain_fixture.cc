#include "tests/support/chain_fixture.h"

#include <vector>

#include "core/tuner.h"

namespace kernelserve::testing {

ChainFixture::ChainFixture() {
  inputs_["x"] = Tensor::FromFloats(DType::kF32, {8}, {1, -2, 3, -4, 5, -6, 7, -8});
  invocation_.kernel_id = kernel_.id();
  invocation_.inputs = SpecsOf(inputs_);
  invocation_.platform = "cpu";
  invocation_.device = device_.fingerprint;
  cache_key_ = invocation_.CacheKey();
  problem_ = *kernel_.Analyze(invocation_.inputs, {});
}

SelectRequest ChainFixture::Request(bool autotune) {
  SelectRequest r;
  r.kernel = &kernel_;
  r.impl = kernel_.impl(Platform::kCpu);
  r.problem = problem_.get();
  r.invocation = &invocation_;
  r.cache_key = &cache_key_;
  r.device = &device_;
  r.policy.allow_autotune = autotune;
  r.tune = [this](const KernelConfig& heuristic,
                  const std::vector<KernelConfig>& candidates) -> absl::StatusOr<TuneReport> {
    ++tunes_;
    absl::StatusOr<std::unique_ptr<PreparedRun>> run =
        kernel_.impl(Platform::kCpu)->Prepare(*problem_, inputs_, device_);
    if (!run.ok()) return run.status();
    TuneOptions options;
    options.warmup = 0;
    options.iters = 2;
    options.time_budget = absl::Seconds(10);
    return Autotune(**run, heuristic, candidates, options);
  };
  return r;
}

}  // namespace kernelserve::testing
