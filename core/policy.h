// AutotunePolicy and the scoped guards that change it (or pin configs) for a block of code.
#ifndef KERNELSERVE_CORE_POLICY_H_
#define KERNELSERVE_CORE_POLICY_H_

#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "core/kernel_config.h"

namespace kernelserve {

// What the selector chain may do on a cache miss. A value type.
struct AutotunePolicy {
  // What a miss in every cache tier leads to.
  enum class MissFallback { kHeuristics, kAutotune };

  bool allow_autotune = false;    // tuning may run at all
  bool allow_heuristics = true;   // the heuristic may answer
  MissFallback cache_miss_fallback = MissFallback::kAutotune;  // tried first on a miss
  bool persist = true;            // chosen configs are written to the persistent store
  int warmup = 1;                 // untimed launches per candidate before timing
  int iters = 5;                  // timed launches per candidate (the median is kept)
  absl::Duration time_budget = absl::Seconds(30);  // per tuning; later candidates are skipped

  // True when a miss should be tuned now.
  bool ShouldAutotune() const {
    return allow_autotune && cache_miss_fallback == MissFallback::kAutotune;
  }
};

// Some fields of a policy, for per-call overrides; unset fields keep the base's value.
struct PolicyPatch {
  std::optional<bool> allow_autotune;
  std::optional<bool> allow_heuristics;
  std::optional<bool> persist;
  // The call's own tuning budget: it may shorten the base's, never lengthen it (the base's is
  // the server's cap).
  std::optional<absl::Duration> time_budget;

  AutotunePolicy ApplyTo(AutotunePolicy base) const;
};

// While alive, replaces the executor's policy on this thread (innermost guard wins).
// Thread safety: affects only the constructing thread; destroy on that thread, in LIFO order.
class ScopedPolicyOverride {
 public:
  explicit ScopedPolicyOverride(const AutotunePolicy& policy);
  ~ScopedPolicyOverride();
  ScopedPolicyOverride(const ScopedPolicyOverride&) = delete;
  ScopedPolicyOverride& operator=(const ScopedPolicyOverride&) = delete;

  // The innermost live override on this thread, or nullopt.
  static std::optional<AutotunePolicy> Current();

 private:
  const AutotunePolicy policy_;
  const ScopedPolicyOverride* const outer_;
};

// While alive, pins configs on this thread: the selector chain's overlay tier answers from it.
// Keys are cache keys ("mean_pooling@v1:0123..."), kernel ids ("mean_pooling@v1") or kernel
// names ("mean_pooling"); the most specific match in the innermost guard wins, then outer ones.
// Thread safety: as ScopedPolicyOverride.
class ScopedConfigOverlay {
 public:
  explicit ScopedConfigOverlay(std::map<std::string, KernelConfig> configs);
  ~ScopedConfigOverlay();
  ScopedConfigOverlay(const ScopedConfigOverlay&) = delete;
  ScopedConfigOverlay& operator=(const ScopedConfigOverlay&) = delete;

  // Looks through the live overlays of this thread.
  static std::optional<KernelConfig> Lookup(const std::string& cache_key,
                                            const std::string& kernel_id,
                                            const std::string& kernel_name);

 private:
  const std::map<std::string, KernelConfig> configs_;
  const ScopedConfigOverlay* const outer_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_POLICY_H_
