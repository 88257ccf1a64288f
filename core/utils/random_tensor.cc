#include "core/utils/random_tensor.h"

#include <cmath>
#include <random>

namespace kernelserve {
namespace {

// Values uniform in [0, 1) from the top 53 bits of a 64-bit draw.
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor tensor = Tensor::Empty(dtype, shape);
  std::mt19937_64 rng(seed);
  const int64_t n = tensor.numel();
  if (HoldsFloats(dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      tensor.SetFloat(i, static_cast<float>(lo + (static_cast<double>(hi) - lo) * Unit(rng)));
    }
    return tensor;
  }
  std::vector<int64_t> values(static_cast<size_t>(n));
  const int64_t low = dtype == DType::kBool ? 0 : static_cast<int64_t>(std::ceil(lo));
  int64_t high = dtype == DType::kBool ? 1 : static_cast<int64_t>(std::floor(hi));
  if (high < low) high = low;
  const uint64_t span = static_cast<uint64_t>(high - low) + 1;
  for (int64_t& v : values) v = low + static_cast<int64_t>(rng() % span);
  return Tensor::FromInts(dtype, shape, values);
}

}  // namespace kernelserve
