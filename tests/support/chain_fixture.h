// ChainFixture: a base test fixture for the selector chain's suites (file store, Redis, the
// config tiers): one call of FakeKernel on x f32[8] on the CPU, and a Request() builder.
#ifndef KERNELSERVE_TESTS_SUPPORT_CHAIN_FIXTURE_H_
#define KERNELSERVE_TESTS_SUPPORT_CHAIN_FIXTURE_H_

#include <atomic>
#include <memory>

#include "core/invocation.h"
#include "core/selector_chain.h"
#include "gtest/gtest.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve::testing {

// Thread safety: Request() may be called from many threads; its tune function counts into the
// atomic tunes_.
class ChainFixture : public ::testing::Test {
 protected:
  ChainFixture();

  // A selection request for the call, allowing autotune when `autotune`. Its tune function
  // counts itself in tunes_, prepares the fake kernel's CPU implementation on inputs_ and times
  // every candidate (no warmup, 2 timed launches).
  SelectRequest Request(bool autotune = true);

  std::shared_ptr<FakeCounters> counters_ = std::make_shared<FakeCounters>();
  FakeKernel kernel_{counters_};
  DeviceInfo device_ = CpuDeviceInfo();
  TensorMap inputs_;                        // {"x": f32[8]}
  std::shared_ptr<const Problem> problem_;  // the kernel's analysis of inputs_
  Invocation invocation_;                   // of inputs_ on the CPU
  std::string cache_key_;                   // invocation_.CacheKey()
  std::atomic<int> tunes_{0};
};

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_CHAIN_FIXTURE_H_
