// The CUDA paged attention kernel's configs: which ones are compiled, the autotune space and the
// heuristic. Plain C++ (no CUDA types), built with or without CUDA so it is testable here.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CONFIG_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CONFIG_H_

#include <cstdint>
#include <vector>

#include "core/config_schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/paged_attention/paged_attention_kernel.h"

namespace kernelserve::cuda {

// The shape of one paged attention problem, as the config choice sees it.
struct PagedAttentionShape {
  DType dtype = DType::kF16;
  int64_t batch = 0;             // B
  int64_t num_heads_kv = 0;      // Hkv
  int64_t rows_per_kv_head = 0;  // Sq * G: the query rows one kv head's pages serve
  int64_t max_seq_len = 0;       // the longest sequence, or a bound on it
  int64_t head_dim = 0;          // D
  bool fp8_cache = false;        // the caches are f8_e4m3 or f8_e5m2
};

// The problem's shape as the config choice sees it. The sequence lengths are data, so
// max_seq_len is their bound max_pages * page_size.
PagedAttentionShape PagedAttentionShapeOf(const PagedAttentionProblem& problem);

// The cuda platform's config schema: num_warps (the compiled warp counts) and "splits" (1 to
// kPagedMaxSplits, always set: a config names its split count).
const ConfigSchema& PagedAttentionCudaConfigSchema();

// The split count of `config` (its named field "splits"), 0 when unset or out of range.
int PagedSplits(const KernelConfig& config);

// True when `config` lies in the compiled space: a compiled warp count, splits in
// [1, kPagedMaxSplits] (any count launches), the fields this kernel does not use zero or empty,
// platform "cuda" or "". `priority` is free.
bool IsPagedConfigCompiled(const KernelConfig& config);

// The compiled configs in a fixed order: each warp count with each split count of kPagedSplits.
const std::vector<KernelConfig>& PagedAttentionCompiledConfigs();
// The autotune space for `shape` on `device`: the heuristic's config first, then its neighbours
// in kPagedSplits and one split. A subset of the compiled configs.
std::vector<KernelConfig> PagedAttentionCandidates(const PagedAttentionShape& shape,
                                                   const DeviceInfo& device);
// A pure function of shape and device; always one of PagedAttentionCandidates(shape, device).
KernelConfig PagedAttentionHeuristic(const PagedAttentionShape& shape, const DeviceInfo& device);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_CONFIG_H_
