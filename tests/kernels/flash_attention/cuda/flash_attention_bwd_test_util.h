// What the GPU tests of flash_attention_bwd share: a case (shape and options), its inputs
// (out and lse from the CPU forward) and the check of GPU configs against the CPU platform;
// and the cu_seqlens and segment ids that the forward's GPU tests build too.
#ifndef KERNELSERVE_TESTS_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_TEST_UTIL_H_
#define KERNELSERVE_TESTS_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/attributes.h"
#include "core/device.h"
#include "core/kernel.h"
#include "core/tensor.h"

namespace kernelserve {

// One backward call's shape and options. A value type.
struct BwdCase {
  std::string label;
  DType dtype = DType::kBF16;
  int64_t b = 2, sq = 128, sk = 128, hq = 8, hkv = 8, d = 64;
  Attributes params;        // the forward's (return_lse is added) and return_dbias
  Shape bias;               // empty = none
  bool masked_row = false;  // bias -inf on every key of query row 0 (every batch and head)
  bool segments = false;    // segment ids of about 10 rows, the last 5 rows padding (id 0)
  // Varlen when set (b, sq and sk unused): the sequences' lengths; q and k get 3 rows past the
  // last sequence.
  std::vector<int64_t> q_lengths, k_lengths;
};

// Relative L2 error allowed per gradient: the GPU rounds P and dS to the dtype for the matrix
// products and each gradient once at the end, and sums in float.
double BwdTolerance(DType dtype);

// cu_seqlens ([n + 1] i32) of sequences of these lengths.
Tensor Offsets(const std::vector<int64_t>& lengths);

// Segment ids [b, s] in runs of about 10 rows (a new id where a random draw from `seed` is 0),
// the last 5 rows of each sequence padding (id 0), so that some query rows see no key.
Tensor Segments(int64_t b, int64_t s, uint64_t seed);

// bf16 and f16 at D 64 and 128, each plain and causal (the defaults' other fields).
std::vector<BwdCase> DtypeHeadDimCases();

// q, k, v, dout (and bias, segment ids, cu_seqlens) random from `seed`; out and lse of the CPU
// forward on them.
TensorMap BwdInputs(const BwdCase& c, uint64_t seed);

// Launches each of `configs` (none: gpu's candidates) of `gpu` twice on `c`, outputs poisoned
// before each launch, and expects every gradient finite, within BwdTolerance of the CPU
// platform of `kernel`, the same bits both times (unless the case says deterministic=false),
// and a masked row's dq 0. Returns false
// (printing why) when gpu.Supports refuses the call, which must be Unimplemented.
bool CheckBwdOnGpu(const Kernel& kernel, const PlatformImpl& gpu, const DeviceInfo& device,
                   const BwdCase& c, uint64_t seed, std::vector<KernelConfig> configs = {});

}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_TEST_UTIL_H_
