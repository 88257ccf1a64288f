// FastDivisor against the division itself (host code: the device's multiply-high is the same
// product's high word).
#include "kernels/paged_attention/cuda/fast_divisor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kernelserve::cuda {
namespace {

// The numerators where an off-by-one shows first: around multiples of d, and the ends.
std::vector<uint32_t> EdgeNumerators(uint32_t d, std::mt19937& rng) {
  std::vector<uint32_t> n = {0, 1, UINT32_MAX, UINT32_MAX - 1, d - 1, d};
  const uint32_t last_multiple = UINT32_MAX / d * d;
  for (uint32_t k : {last_multiple, last_multiple - d}) {
    n.push_back(k);
    n.push_back(k - 1);
    if (k < UINT32_MAX) n.push_back(k + 1);
  }
  for (int i = 0; i < 64; ++i) {
    const uint32_t multiple = rng() / d * d;
    n.push_back(multiple);
    n.push_back(multiple - 1);
    n.push_back(rng());
  }
  return n;
}

TEST(FastDivisorTest, EqualsTheDivisionForSmallDivisorsAndEveryNumeratorKind) {
  std::mt19937 rng(7);
  for (uint32_t d = 1; d <= 4096; ++d) {
    const FastDivisor f = FastDivisor::Of(d);
    for (uint32_t n : EdgeNumerators(d, rng)) {
      ASSERT_EQ(f.Div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.Mod(n), n % d) << n << " % " << d;
    }
  }
}

TEST(FastDivisorTest, EqualsTheDivisionForLargeAndPowerOfTwoNeighbourDivisors) {
  std::mt19937 rng(11);
  std::vector<uint32_t> divisors = {UINT32_MAX, UINT32_MAX - 1, 0x80000000u, 0x80000001u,
                                    0x7FFFFFFFu};
  for (int k = 1; k < 32; ++k) {
    const uint32_t p = uint32_t{1} << k;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  for (int i = 0; i < 2000; ++i) divisors.push_back(rng() | 1u);
  for (uint32_t d : divisors) {
    const FastDivisor f = FastDivisor::Of(d);
    for (uint32_t n : EdgeNumerators(d, rng)) {
      ASSERT_EQ(f.Div(n), n / d) << n << " / " << d;
    }
  }
}

TEST(FastDivisorTest, EveryNumeratorBelowTwoToTheTwentyFourForTheAppendsDivisors) {
  // The divisors a paged append splits by: D / 8 or D, Hkv, Sq and page sizes.
  for (uint32_t d : {1u, 3u, 7u, 8u, 12u, 16u, 24u, 32u, 48u, 96u, 100u, 128u, 256u, 1000u}) {
    const FastDivisor f = FastDivisor::Of(d);
    for (uint32_t n = 0; n < (1u << 24); ++n) {
      if (f.Div(n) != n / d) FAIL() << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace kernelserve::cuda
