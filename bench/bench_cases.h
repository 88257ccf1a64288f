// The mean pooling benchmark cases and how one is timed on the GPU.
#ifndef KERNELSERVE_BENCH_BENCH_CASES_H_
#define KERNELSERVE_BENCH_BENCH_CASES_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/mean_pooling/cuda/mean_pooling_launch.h"

namespace kernelserve::bench {

// One benchmark case. A value type.
struct BenchCase {
  std::string name;  // "dense bf16 [32,2048,4096]"
  PoolingForm form = PoolingForm::kDense;
  DType dtype = DType::kBF16;
  int64_t batch = 0;    // B (dense, masked) or N (varlen)
  int64_t seq_len = 0;  // S (dense, masked)
  int64_t hidden = 0;   // H
  // Masked: rows counted per sequence (a prefix of each); varlen: the sequence lengths.
  std::vector<int64_t> lengths;
};

// The cases of issue 4: dense bf16/f32 [32,2048,4096] and bf16 [64,512,1024], their masked
// versions (counted prefix lengths drawn from [S/4, S]), and varlen bf16 of 256 sequences of
// 1..4096 rows with H = 4096. Lengths come from `seed`.
std::vector<BenchCase> DefaultCases(uint64_t seed);

// Rows of x in the case (B*S, or the sum of the varlen lengths) and the rows the mean reads.
int64_t RowsOf(const BenchCase& c);
int64_t CountedRowsOf(const BenchCase& c);

// The median kernel time of one config.
struct Timing {
  KernelConfig config;
  double median_us = 0.0;
};

struct CaseResult {
  int64_t x_bytes = 0;  // bytes of x, read once
  int buffers = 1;      // copies of x rotated through, so repeated runs do not hit in L2
  Timing heuristic;     // the config MeanPoolingHeuristic picks
  Timing tuned;         // the fastest candidate (re-timed with the full iteration count)
  int candidates = 0;
};

// Allocates and fills the case's inputs on the current device, times the heuristic config and,
// when `tune`, every candidate (CUDA events around each launch, `iters` runs after 5 warm-up
// runs, median). Errors name the CUDA call that failed.
absl::StatusOr<CaseResult> RunCase(const BenchCase& c, const DeviceInfo& device, int iters,
                                   bool tune, cudaStream_t stream);

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written, as the
// median of `iters` copies of `bytes` bytes.
absl::StatusOr<double> MeasureCopyBandwidth(size_t bytes, int iters, cudaStream_t stream);

// One flash attention forward case (bf16 or f16, head dim 64 or 128). A value type.
struct AttentionCase {
  std::string name;  // "bf16 D=128 [4,4096] Hq=16 causal"
  DType dtype = DType::kBF16;
  int64_t batch = 0;    // B (dense) or N (varlen)
  int64_t seq_len = 0;  // S = Sq = Sk (dense)
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  bool causal = false;
  std::vector<int64_t> lengths;  // varlen: the sequence lengths (q and k alike); else empty
  // Dense only, one option beside the plain case: "" (none), "softcap" (logits_soft_cap 30),
  // "window" (window_left = window_right = 512), "segments" (one segment id over every row:
  // the plain case's pairs through the segment mask) or "bias" (f32 [1,1,S,S], broadcast).
  std::string option;
};

// The cases of issue 5: bf16, D=128, Hq=16: (B=8,S=2048), (B=4,S=4096), (B=2,S=8192), each
// non-causal and causal; D=64 (B=16,S=1024); D=32, 96 and 256 (B=8,S=2048), causal and not;
// GQA Hq=32, Hkv=8, S=4096 (B=2); varlen of 64 sequences of 128..4096 rows (from `seed`),
// Hq=16, D=128, causal and not; then (B=4,S=4096) D=128 with each option of AttentionCase.
std::vector<AttentionCase> DefaultAttentionCases(uint64_t seed);

// Floating-point operations of a case: 4 * Hq * D * the (query, key) pairs seen: sum over
// sequences of Sq * Sk, halved when causal; the band's pairs with a window.
double AttentionFlops(const AttentionCase& c);

struct AttentionResult {
  Timing heuristic;  // the config the CUDA heuristic picks
  Timing tuned;      // the fastest candidate (median of the same iteration count)
  int candidates = 0;
  std::vector<Timing> each;          // every candidate timed, in candidate order (when tuning)
  Timing best_cuda;                  // the fastest own-kernel config (median_us 0 when none)
  Timing best_cudnn;                 // the fastest cuDNN plan (median_us 0 when none)
  double first_heuristic_ms = 0.0;   // the first Heuristic call (builds cuDNN's graph there)
  double cached_heuristic_ms = 0.0;  // the second one (the graph cached)
};

// Makes random inputs on the host, prepares them with the CUDA flash attention implementation
// on `device` and times the heuristic config and, when `tune`, every candidate (each the median
// of `iters` launches timed with CUDA events after 3 warm-up launches).
absl::StatusOr<AttentionResult> RunAttentionCase(const AttentionCase& c, const DeviceInfo& device,
                                                 int iters, bool tune);

}  // namespace kernelserve::bench

#endif  // KERNELSERVE_BENCH_BENCH_CASES_H_
