// The CPU flash attention backward kernel (the VJP of FlashAttentionCpu) as a free function
// over raw buffers.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/kernel_config.h"
#include "kernels/flash_attention/cpu/flash_attention.h"

namespace kernelserve::cpu {

// One backward call. Pointers are borrowed; the caller keeps them alive for the call.
struct FlashAttentionBwdArgs {
  // The forward call, as FlashAttentionCpu reads it: dtype, sizes, q, k, v, offsets, params,
  // bias and segment ids; its interrupt is checked between work items. Its out and lse are
  // not used (the two below are).
  FlashAttentionArgs fwd;
  const void* out = nullptr;  // the forward's out [total_q, Hq, D], fwd.dtype
  // The forward's lse, laid out as FlashAttentionArgs::lse; -inf marks a row that sees no key.
  const float* lse = nullptr;
  const void* dout = nullptr;  // [total_q, Hq, D], fwd.dtype
  void* dq = nullptr;          // [total_q, Hq, D], fwd.dtype, written in full
  void* dk = nullptr;          // [total_k, Hkv, D], fwd.dtype, written in full
  void* dv = nullptr;          // [total_k, Hkv, D], fwd.dtype, written in full
  // Dense only. The gradient of an additive bias [dbias_batch, dbias_heads, seq_len_q,
  // seq_len_k] (dbias_batch 1 or num_sequences, dbias_heads 1 or Hq; 1 sums over that dim),
  // written in full, or null. It need not match fwd.bias's strides, nor fwd.bias be given.
  float* dbias = nullptr;
  int64_t dbias_batch = 0;
  int64_t dbias_heads = 0;
};

// dq, dk, dv (and dbias) of the forward at args.fwd for the output gradient dout, with
// P = exp(logits - lse) from the given lse and D_i = rowsum(dout * out) from the given out
// (the math is FlashAttentionBwdSchema's, flash_attention_bwd_kernel.h). Accumulates in
// double and rounds each output once to its dtype. Each output element is summed by one
// work item in a fixed order (dq over keys; dk and dv over the group's query heads, then
// rows; dbias over sequences, then heads), so results are the same bits for every tile size
// and thread count. Rows no sequence covers get zeros.
// config.block_q / block_k: query and key rows per work item and tile (0 = 32 / 64).
// config "threads": worker threads (0 = hardware threads).
// InvalidArgument for inconsistent sizes or offsets, a missing buffer, or a config that
// CheckFlashAttentionBwdCpuConfig refuses.
absl::Status FlashAttentionBwdCpu(const FlashAttentionBwdArgs& args, const KernelConfig& config);

// OK when `config` can drive FlashAttentionBwdCpu: platform "" or "cpu", block_q and block_k
// in 0..kMaxCpuAttentionTile, threads in 0..kMaxCpuThreads, the other fields 0.
// InvalidArgument naming the field and range otherwise.
absl::Status CheckFlashAttentionBwdCpuConfig(const KernelConfig& config);
// The cpu platform's config schema: the fields above and "threads" (worker threads).
const ConfigSchema& FlashAttentionBwdCpuConfigSchema();

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_H_
