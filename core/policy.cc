#include "core/policy.h"

#include <algorithm>
#include <utility>

namespace kernelserve {
namespace {

thread_local const ScopedPolicyOverride* g_policy_top = nullptr;
thread_local const ScopedConfigOverlay* g_overlay_top = nullptr;

}  // namespace

AutotunePolicy PolicyPatch::ApplyTo(AutotunePolicy base) const {
  if (allow_autotune) base.allow_autotune = *allow_autotune;
  if (allow_heuristics) base.allow_heuristics = *allow_heuristics;
  if (persist) base.persist = *persist;
  if (time_budget) base.time_budget = std::min(base.time_budget, *time_budget);
  return base;
}

ScopedPolicyOverride::ScopedPolicyOverride(const AutotunePolicy& policy)
    : policy_(policy), outer_(g_policy_top) {
  g_policy_top = this;
}

ScopedPolicyOverride::~ScopedPolicyOverride() { g_policy_top = outer_; }

std::optional<AutotunePolicy> ScopedPolicyOverride::Current() {
  if (g_policy_top == nullptr) return std::nullopt;
  return g_policy_top->policy_;
}

ScopedConfigOverlay::ScopedConfigOverlay(std::map<std::string, KernelConfig> configs)
    : configs_(std::move(configs)), outer_(g_overlay_top) {
  g_overlay_top = this;
}

ScopedConfigOverlay::~ScopedConfigOverlay() { g_overlay_top = outer_; }

std::optional<KernelConfig> ScopedConfigOverlay::Lookup(const std::string& cache_key,
                                                        const std::string& kernel_id,
                                                        const std::string& kernel_name) {
  for (const ScopedConfigOverlay* o = g_overlay_top; o != nullptr; o = o->outer_) {
    for (const std::string* key : {&cache_key, &kernel_id, &kernel_name}) {
      auto it = o->configs_.find(*key);
      if (it != o->configs_.end()) return it->second;
    }
  }
  return std::nullopt;
}

}  // namespace kernelserve
