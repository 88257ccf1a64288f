// Device-side random fill for the benchmark (no host round trip for gigabytes of input).
#ifndef KERNELSERVE_BENCH_BENCH_FILL_H_
#define KERNELSERVE_BENCH_BENCH_FILL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kernelserve::bench {

// Element types FillRandom writes.
enum class FillType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kF8E4M3 = 3, kF8E5M2 = 4 };

// Writes `count` values uniform in [-0.5, 1.5) (a hash of `seed` and the index, so never all
// zero) to device memory `data` on `stream`. Returns the launch's error.
cudaError_t FillRandom(void* data, int64_t count, FillType type, uint64_t seed,
                       cudaStream_t stream);

// Launches a kernel that does nothing (one block of one thread): the floor of a launch.
cudaError_t LaunchEmpty(cudaStream_t stream);

}  // namespace kernelserve::bench

#endif  // KERNELSERVE_BENCH_BENCH_FILL_H_
