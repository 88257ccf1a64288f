// FastDivisor: division of 32-bit indices by a divisor fixed for a launch, without a division
// instruction sequence per index. Host and device code.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_FAST_DIVISOR_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_FAST_DIVISOR_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kernelserve::cuda {

// n / d for every 32-bit n and a divisor d >= 1 by a multiply-high, an add and a shift
// (Granlund and Montgomery's division by invariant integers): with l = ceil(log2 d) and
// m = floor(2^32 (2^l - d) / d) + 1, which is below 2^32, n / d = (umulhi(n, m) + n) >> l, the
// sum taken in 64 bits. A 32-bit division compiles to about twenty instructions; this to three.
// A value type (built on the host, passed to kernels by value).
struct FastDivisor {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  // REQUIRES: d >= 1.
  static FastDivisor Of(uint32_t d) {
    FastDivisor f;
    f.divisor = d;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    f.multiplier =
        static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
  }

  __host__ __device__ __forceinline__ uint32_t Div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const auto high = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{high} + n) >> shift);
  }
  __host__ __device__ __forceinline__ uint32_t Mod(uint32_t n) const {
    return n - Div(n) * divisor;
  }
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_FAST_DIVISOR_H_
