// The CPU platform of flash attention: the reference implementation (FlashAttentionCpu), its
// configs and runs.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_CPU_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_CPU_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "kernels/flash_attention/cpu/flash_attention.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve {

// Configs: block_q, block_k (tiles; 0 = the default) and threads (the named field: worker threads,
// 0 = one per hardware thread), within the limits of cpu/flash_attention.h. Heuristic: query tiles
// of 16 rows for sequences up to 16, else 32; key tiles of 64 up to D = 64, else 32; one thread
// below 2^22 multiply-adds, else every hardware thread. Candidates: block_q in {16, 32, 64} x
// block_k in {32, 64, 128} x threads in {1, 2, hardware threads}. Runs every problem of the
// contract. Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeFlashAttentionCpu();

// What the CPU platforms of flash_attention and flash_attention_bwd share.
namespace cpu {

// A call's index inputs as int64, each empty when not given: what the args of its CPU run
// point into. A value type.
struct FlashIndexInputs {
  explicit FlashIndexInputs(const TensorMap& inputs);

  std::vector<int64_t> cu_seqlens_q;
  std::vector<int64_t> cu_seqlens_k;
  std::vector<int64_t> q_segment_ids;
  std::vector<int64_t> kv_segment_ids;
};

// The args of the forward call `p`: dtype, q, k, v, sizes, params, offsets, bias and segment
// ids; out, lse and interrupt left unset. They point into `inputs` and `index`, which must
// outlive them.
FlashAttentionArgs FlashArgsOf(const FlashAttentionProblem& p, const TensorMap& inputs,
                               const FlashIndexInputs& index);

// The heuristic of MakeFlashAttentionCpu's header for the forward call `p`, its thread count
// judged by `macs_per_element` multiply-adds per (query, key, dim).
KernelConfig FlashCpuHeuristic(const FlashAttentionProblem& p, const DeviceInfo& device,
                               double macs_per_element);
// The candidates of MakeFlashAttentionCpu's header.
std::vector<KernelConfig> FlashCpuCandidates(const DeviceInfo& device);

}  // namespace cpu

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_CPU_H_
