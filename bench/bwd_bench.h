// The backward kernels' benchmark cases (mean_pooling_bwd against the copy bandwidth,
// flash_attention_bwd in TFLOP/s) and a generic timing of one kernel call on a GPU platform.
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
  std::vector<Timing> each;  // every candidate timed, in candidate order (when tuning)
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

// The plain dense forward cases of head dim 64 and 128 (DefaultAttentionCases, no option),
// whose backward flash_attention_bwd benchmarks.
std::vector<AttentionCase> AttentionBwdCases(uint64_t seed);

// Floating-point operations of the backward of `c`: 2.5x the forward's (five matrix products
// of the forward's size to its two).
double AttentionBwdFlops(const AttentionCase& c);

// The cases of the dbias table: bf16 D=128 [2,2048] Hq=16, causal and not, with a bias
// [1, Hq, S, S] (summed over the batch in dbias).
std::vector<AttentionCase> AttentionDbiasCases();

// flash_attention_bwd's inputs for `c`: q, k, v and dout random (and with `bias` a random f32
// bias [1, Hq, S, S]), out and lse from the flash attention forward on `device` (the heuristic
// config of its cuda platform).
absl::StatusOr<TensorMap> AttentionBwdInputs(const AttentionCase& c, const DeviceInfo& device,
                                             bool bias = false);

}  // namespace kernelserve::bench

#endif  // KERNELSERVE_BENCH_BWD_BENCH_H_
