// The CUDA paged attention launchers: device pointers and sizes in, kernel launches on a
// stream. Included by host C++ (the dispatch, the platform, the bench) and by the .cu files.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_LAUNCH_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kernelserve::cuda {

// One call's device buffers, sizes and options. Pointers are borrowed; every tensor is
// row-major and 16-byte aligned. Token t of sequence b is slot t % page_size of page
// block_table[b * max_pages + t / page_size] (see paged_attention_kernel.h for the contract).
struct PagedDeviceArgs {
  const void* q = nullptr;                 // [batch, seq_len_q, Hq, D]
  const void* k_cache = nullptr;           // [num_pages, page_size, Hkv, D]
  const void* v_cache = nullptr;           // [num_pages, page_size, Hkv, D]
  const int32_t* block_table = nullptr;    // [batch, max_pages], valid where used
  const int32_t* cache_seqlens = nullptr;  // [batch], L per sequence (new tokens included)
  void* out = nullptr;                     // [batch, seq_len_q, Hq, D], written in full
  float* lse = nullptr;                    // [batch, Hq, seq_len_q] natural log, or null
  // fp8 caches only: the value of element (.., h, d) is cache * scale[h]; null = 1.
  const float* k_scale = nullptr;  // [Hkv]
  const float* v_scale = nullptr;  // [Hkv]
  int64_t batch = 0;
  int64_t seq_len_q = 0;     // Sq
  int64_t num_heads_q = 0;   // Hq
  int64_t num_heads_kv = 0;  // Hkv, dividing Hq
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t max_pages = 0;
  // The longest cache_seqlens entry, or an upper bound (sizes the splits).
  int64_t max_seq_len = 0;
  float softmax_scale = 1.0f;
  bool causal = false;
  int64_t window_left = -1;   // -1 = unlimited
  int64_t window_right = -1;  // -1 = unlimited
  float softcap = 0.0f;       // 0 = off
};

// Appending new keys and values: k and v [batch, seq_len_q, Hkv, D] written into k_cache and
// v_cache at positions L - seq_len_q .. L - 1 of each sequence with L = cache_seqlens[b] > 0.
struct PagedAppendArgs {
  const void* k = nullptr;
  const void* v = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* cache_seqlens = nullptr;
  // fp8 caches only: k and v are stored as fp8(x / scale[h]) (float division, saturating
  // round-to-nearest-even); null = 1.
  const float* k_scale = nullptr;  // [Hkv]
  const float* v_scale = nullptr;  // [Hkv]
  int64_t batch = 0;
  int64_t seq_len_q = 0;
  int64_t num_heads_kv = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  int64_t max_pages = 0;
};

// Bytes of workspace a split-KV launch with `num_splits` splits needs (partial outputs and
// their log-sum-exps, float), 0 for one split.
size_t PagedWorkspaceBytes(const PagedDeviceArgs& args, int head_dim, int num_splits);

// Launches paged attention on `stream` and returns the launch's error (it does not wait).
// T: __half or __nv_bfloat16 (q and out); TC: the caches' element type, T itself or
// __nv_fp8_e4m3 / __nv_fp8_e5m2 (scaled by k_scale, v_scale); kHeadDim: D; num_splits > 1 runs
// split-KV (each split a slice of every sequence's tokens) and a combine pass; kWarps: warps per
// block. REQUIRES: `workspace` holds PagedWorkspaceBytes(args, kHeadDim, num_splits) bytes.
template <typename T, typename TC, int kHeadDim, int kWarps>
cudaError_t LaunchPagedAttention(const PagedDeviceArgs& args, int num_splits, void* workspace,
                                 cudaStream_t stream);

// Writes the new keys and values (T) into the caches (TC, as above) (it does not wait).
template <typename T, typename TC>
cudaError_t LaunchPagedAppend(const PagedAppendArgs& args, cudaStream_t stream);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_LAUNCH_H_
