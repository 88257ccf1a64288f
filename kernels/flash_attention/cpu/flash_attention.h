// The CPU flash attention forward kernel as a free function over raw buffers.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/dtype.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// One attention call. Pointers are borrowed; the caller keeps them alive for the call.
// Rows of q/out are [row, Hq, D] and rows of k/v are [row, Hkv, D], row-major.
struct FlashAttentionArgs {
  DType dtype = DType::kF32;  // of q, k, v and out: kF32, kF16 or kBF16
  const void* q = nullptr;    // [total_q, Hq, D]
  const void* k = nullptr;    // [total_k, Hkv, D]
  const void* v = nullptr;    // [total_k, Hkv, D]
  void* out = nullptr;        // [total_q, Hq, D], written in full
  // Log-sum-exp of the scaled logits per query row (natural log; -inf for a row that sees no
  // key), or null. Dense: [num_sequences, Hq, seq_len_q]; varlen: [Hq, total_q].
  float* lse = nullptr;
  int64_t total_q = 0;        // rows of q
  int64_t total_k = 0;        // rows of k and v
  int64_t num_heads_q = 0;    // Hq
  int64_t num_heads_kv = 0;   // Hkv; Hq is a multiple of it
  int64_t head_dim = 0;       // D
  int64_t num_sequences = 0;  // B (dense) or N (varlen)
  // Dense (cu_seqlens_q null): sequence b is q rows [b*seq_len_q, ...) and k rows
  // [b*seq_len_k, ...).
  int64_t seq_len_q = 0;
  int64_t seq_len_k = 0;
  // Varlen when both are set: num_sequences + 1 offsets each, from 0, never decreasing, ending
  // at most at total_q / total_k.
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_k = nullptr;
  float softmax_scale = 1.0f;  // logits = softmax_scale * q.k
  bool causal = false;         // key j visible to query i iff j <= i + Sk - Sq
  int64_t window_left = -1;    // >= 0: visible iff j >= i + Sk - Sq - window_left
  int64_t window_right = -1;   // >= 0: visible iff j <= i + Sk - Sq + window_right
  float softcap = 0.0f;        // > 0: logits = softcap * tanh(logits / softcap), before bias
  // Dense only. Additive bias element (b, h, i, j) at
  // bias[b * bias_batch_stride + h * bias_head_stride + i * seq_len_k + j]; a stride of 0
  // broadcasts. Null = no bias. A -inf bias hides the key.
  const float* bias = nullptr;
  int64_t bias_batch_stride = 0;
  int64_t bias_head_stride = 0;
  // Dense only, [num_sequences, seq_len_q] and [num_sequences, seq_len_k]: query i sees key j
  // iff q_segment_ids[i] > 0 and equals kv_segment_ids[j]. Both null = no segments.
  const int64_t* q_segment_ids = nullptr;
  const int64_t* kv_segment_ids = nullptr;
  // Checked between work items when not null; its first non-OK status stops the call, which
  // then returns it (out is left partly written).
  const std::function<absl::Status()>* interrupt = nullptr;
};

// out = softmax(logits over the visible keys) @ v per sequence, query row and head, with head
// h of q reading kv head h / (Hq / Hkv). Online softmax over key tiles, float accumulation,
// one rounding to `dtype` at the end. A query row that sees no key gives zeros (lse -inf).
// config.block_q / block_k: query rows per work item and key rows per tile (0 = 32 / 64).
// config "threads": worker threads (0 = hardware threads).
// InvalidArgument for inconsistent sizes or offsets, or a config with negative fields or a
// platform other than "" or "cpu".
absl::Status FlashAttentionCpu(const FlashAttentionArgs& args, const KernelConfig& config);

// The largest block_q and block_k a config may ask for (0 = the default tile).
inline constexpr int kMaxCpuAttentionTile = 1024;
// OK when `config` can drive FlashAttentionCpu: platform "" or "cpu", block_q and block_k in
// 0..kMaxCpuAttentionTile, threads in 0..kMaxCpuThreads, the other fields 0.
// InvalidArgument naming the field and range otherwise.
absl::Status CheckFlashAttentionCpuConfig(const KernelConfig& config);
// The cpu platform's config schema: the fields above and "threads" (worker threads).
const ConfigSchema& FlashAttentionCpuConfigSchema();

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_H_
