// The backward kernels' benchmark cases (mean_pooling_bwd against the copy bandwidth) and a
// generic timing of one kernel call on the CUDA platform.
#ifndef KERNELSERVE_BENCH_BWD_BENCH_H_
#define KERNELSERVE_BENCH_BWD_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_cases.h"
#include "core/attributes.h"
#include "core/device.h"
#include "core/kernel.h"

namespace kernelserve::bench {

// One call of `kernel` timed on `device`'s CUDA platform: the heuristic config and, when
// `tune`, every candidate, each the median of `iters` launches (CUDA events) after 3 warm-up
// launches.
struct KernelTiming {
  Timing heuristic;
  Timing tuned;  // the fastest of heuristic and candidates
  int candidates = 0;
};
absl::StatusOr<KernelTiming> TimeKernel(const Kernel& kernel, const TensorMap& inputs,
                                        const Attributes& params, const DeviceInfo& device,
                                        int iters, bool tune);

// One mean_pooling_bwd case: the forward's x shape (shape only), dout random, and a mask
// (counted prefixes) or cu_seqlens as in the forward's cases. A value type.
struct PoolingBwdCase {
  std::string name;  // "dense bf16 [32,2048,4096]"
  TensorMap inputs;
  int64_t dx_bytes = 0;
};

// dense bf16 [32,2048,4096] and [64,512,1024], f32 [32,2048,4096], masked bf16
// [32,2048,4096] (prefixes from `seed`) and varlen bf16 of 256 sequences of 1..4096 rows,
// H = 4096.
std::vector<PoolingBwdCase> PoolingBwdCases(uint64_t seed);

}  // namespace kernelserve::bench

#endif  // KERNELSERVE_BENCH_BWD_BENCH_H_
