// The CPU paged attention kernel as free functions over raw buffers: the append and the
// attention, accumulated in double (the reference the GPU kernels are checked against).
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/dtype.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// One call. Pointers are borrowed; the caller keeps them alive for the call. Token t of
// sequence b is slot t % page_size of page block_table[b * max_pages + t / page_size].
struct PagedAttentionArgs {
  DType dtype = DType::kF32;        // of q, out, k, v: kF32, kF16 or kBF16
  DType cache_dtype = DType::kF32;  // of the caches: dtype, or kF8E4M3 / kF8E5M2 (dtype f16, bf16)
  const void* q = nullptr;          // [batch, seq_len_q, Hq, D]
  void* k_cache = nullptr;          // [num_pages, page_size, Hkv, D]; written by the append
  void* v_cache = nullptr;          // [num_pages, page_size, Hkv, D]; written by the append
  const int64_t* block_table = nullptr;    // [batch, max_pages], valid where used
  const int64_t* cache_seqlens = nullptr;  // [batch]
  const void* k = nullptr;                 // [batch, seq_len_q, Hkv, D] to append, or null
  const void* v = nullptr;                 // with k
  void* out = nullptr;                     // [batch, seq_len_q, Hq, D], written in full
  float* lse = nullptr;                    // [batch, Hq, seq_len_q], or null
  // fp8 caches: cache element (.., h, x) stands for float(element) * scale[h].
  const float* k_scale = nullptr;  // [Hkv], null = 1
  const float* v_scale = nullptr;  // [Hkv], null = 1
  int64_t batch = 0;
  int64_t seq_len_q = 0;
  int64_t num_heads_q = 0;
  int64_t num_heads_kv = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  int64_t max_pages = 0;
  double softmax_scale = 1.0;
  bool causal = false;
  int64_t window_left = -1;  // -1 = unlimited
  int64_t window_right = -1;
  double softcap = 0.0;  // 0 = off
  // Checked between work items when not null; its first non-OK status stops the call.
  const std::function<absl::Status()>* interrupt = nullptr;
};

// Writes k and v (when set) into the caches at positions L - seq_len_q .. L - 1 of each
// sequence with L > 0: copied as they are, or into fp8 caches as fp8(float(x) / scale[h])
// (the division in float, then FloatToF8E4M3 / FloatToF8E5M2: what the GPU writes, bit for bit).
// REQUIRES: the kernel's ValidateData passed on the index data.
void PagedAppendCpu(const PagedAttentionArgs& args);

// out = softmax(logits over the visible keys) @ v per sequence, query and head (head h of q
// reads kv head h / (Hq / Hkv)), every sum in double, one rounding to `dtype` at the end; a
// query that sees no key gives zeros and lse -inf. Reads the caches as they are (append first).
// config "threads": worker threads (0 = hardware threads). The interrupt's status, else OK.
// fp8 caches: each head's scale multiplies its dot products and its sum of values in double.
absl::Status PagedAttentionCpu(const PagedAttentionArgs& args, const KernelConfig& config);

// The cpu platform's config schema: "threads" alone.
const ConfigSchema& PagedAttentionCpuConfigSchema();
// OK when `config` can drive PagedAttentionCpu (platform "" or "cpu", threads in range);
// InvalidArgument naming the field otherwise.
absl::Status CheckPagedAttentionCpuConfig(const KernelConfig& config);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CPU_PAGED_ATTENTION_H_
