#include "core/policy.h"

#include <thread>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

AutotunePolicy Tuning(bool autotune, int iters) {
  AutotunePolicy p;
  p.allow_autotune = autotune;
  p.iters = iters;
  return p;
}

TEST(ScopedPolicyOverrideTest, InnermostWinsAndScopesUnwind) {
  EXPECT_FALSE(ScopedPolicyOverride::Current().has_value());
  {
    ScopedPolicyOverride outer(Tuning(true, 3));
    EXPECT_EQ(ScopedPolicyOverride::Current()->iters, 3);
    {
      ScopedPolicyOverride inner(Tuning(false, 7));
      EXPECT_EQ(ScopedPolicyOverride::Current()->iters, 7);
      EXPECT_FALSE(ScopedPolicyOverride::Current()->allow_autotune);
    }
    EXPECT_EQ(ScopedPolicyOverride::Current()->iters, 3);
    bool seen_elsewhere = true;
    std::thread([&] { seen_elsewhere = ScopedPolicyOverride::Current().has_value(); }).join();
    EXPECT_FALSE(seen_elsewhere);
  }
  EXPECT_FALSE(ScopedPolicyOverride::Current().has_value());
}

TEST(AutotunePolicyTest, ShouldAutotuneNeedsBothSwitches) {
  AutotunePolicy p;
  EXPECT_FALSE(p.ShouldAutotune());
  p.allow_autotune = true;
  EXPECT_TRUE(p.ShouldAutotune());
  p.cache_miss_fallback = AutotunePolicy::MissFallback::kHeuristics;
  EXPECT_FALSE(p.ShouldAutotune());
}

TEST(PolicyPatchTest, SetFieldsWin) {
  AutotunePolicy base = Tuning(true, 9);
  base.persist = true;
  PolicyPatch patch;
  EXPECT_TRUE(patch.ApplyTo(base).allow_autotune);
  patch.allow_autotune = false;
  patch.persist = false;
  AutotunePolicy patched = patch.ApplyTo(base);
  EXPECT_FALSE(patched.allow_autotune);
  EXPECT_FALSE(patched.persist);
  EXPECT_TRUE(patched.allow_heuristics);
  EXPECT_EQ(patched.iters, 9);
}

TEST(ScopedConfigOverlayTest, MostSpecificKeyThenOuterScopes) {
  KernelConfig by_name, by_id, by_key;
  by_name.block_size = 1;
  by_id.block_size = 2;
  by_key.block_size = 3;
  EXPECT_FALSE(ScopedConfigOverlay::Lookup("k@v1:ab", "k@v1", "k").has_value());
  ScopedConfigOverlay outer({{"k", by_name}, {"other@v1:00", by_key}});
  EXPECT_EQ(ScopedConfigOverlay::Lookup("k@v1:ab", "k@v1", "k")->block_size, 1);
  {
    ScopedConfigOverlay inner({{"k@v1", by_id}});
    EXPECT_EQ(ScopedConfigOverlay::Lookup("k@v1:ab", "k@v1", "k")->block_size, 2);
    ScopedConfigOverlay innermost({{"k@v1:ab", by_key}});
    EXPECT_EQ(ScopedConfigOverlay::Lookup("k@v1:ab", "k@v1", "k")->block_size, 3);
    EXPECT_EQ(ScopedConfigOverlay::Lookup("k@v1:cd", "k@v1", "k")->block_size, 2);
  }
  EXPECT_FALSE(ScopedConfigOverlay::Lookup("j@v1:ab", "j@v1", "j").has_value());
}

}  // namespace
}  // namespace kernelserve
