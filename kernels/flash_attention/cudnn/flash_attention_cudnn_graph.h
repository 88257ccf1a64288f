// cuDNN's SDPA forward and backward as the cudnn platform of flash attention and of
// flash_attention_bwd run them: one cudnn-frontend graph per problem and device, built on first use
// and kept in a bounded cache (least recently used out first), and its plans queued on a stream.
// The only code that sees cudnn-frontend.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_GRAPH_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_GRAPH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve::cudnn {

// The device memory one call reads and writes, in the contract's dense layouts (q, out
// [B,Sq,Hq,D]; k, v [B,Sk,Hkv,D]; bias [B or 1, Hq or 1, Sq, Sk] f32; lse [B,Hq,Sq] f32).
struct FlashPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* bias = nullptr;  // when the problem has a bias
  void* out = nullptr;
  float* lse = nullptr;  // when the problem returns lse
};

// OK when cuDNN runs `problem` on device `ordinal`: CheckCudnnFlashRules passes, and the
// problem's graph builds and passes cuDNN's support check with at least one plan. Unimplemented
// with cuDNN's reason otherwise; Unavailable when cuDNN is not loaded. The first call for a
// problem builds its graph on the calling thread (milliseconds); the verdict is cached with it,
// except for failures that may pass on a retry (out of memory, a CUDA error). Thread-safe.
absl::Status CheckFlashGraph(const FlashAttentionProblem& problem, int ordinal);

// The plans of the problem's graph that built, at most kMaxFlashPlans, in cuDNN's order.
// REQUIRES: CheckFlashGraph(problem, ordinal).ok(), else its status is returned.
absl::StatusOr<int> FlashPlanCount(const FlashAttentionProblem& problem, int ordinal);

// Queues plan `plan_index` of the problem's graph on `stream` (the calling thread's stream for
// `ordinal`), with its workspace from the device's memory pool, freed in stream order.
// InvalidArgument when there is no such plan. Thread-safe.
absl::Status EnqueueFlashGraph(const FlashAttentionProblem& problem, int plan_index,
                               const FlashPointers& pointers, int ordinal, cudaStream_t stream);

// The device memory one backward call reads and writes: q, k, v, bias as above; out and dout
// [B,Sq,Hq,D], lse [B,Hq,Sq] f32 read; dq [B,Sq,Hq,D], dk and dv [B,Sk,Hkv,D] and dbias (bias's
// shape, f32, when the problem returns it) written.
struct FlashBwdPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* bias = nullptr;
  const void* out = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;  // finite: a row that sees no key carries a large value
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dbias = nullptr;
};

// The same for the backward: cuDNN's SDPA backward graph for the problem (its deterministic
// algorithm where the problem asks for it), cached beside the forward graphs.
absl::Status CheckFlashGraph(const FlashAttentionBwdProblem& problem, int ordinal);
absl::StatusOr<int> FlashPlanCount(const FlashAttentionBwdProblem& problem, int ordinal);
absl::Status EnqueueFlashGraph(const FlashAttentionBwdProblem& problem, int plan_index,
                               const FlashBwdPointers& pointers, int ordinal, cudaStream_t stream);

// The graph cache as a whole, for tests and the logs. A value type.
struct FlashGraphCacheStats {
  int64_t entries = 0;    // graphs (and cached refusals) held now
  int64_t builds = 0;     // graphs built since the start
  int64_t evictions = 0;  // entries dropped to stay within the capacity
};
FlashGraphCacheStats GetFlashGraphCacheStats();

// The most entries the cache holds, over all devices (default 256; at least 1). Entries in use
// by a call when they are evicted live until that call is done.
void SetFlashGraphCacheCapacity(size_t entries);

}  // namespace kernelserve::cudnn

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDNN_FLASH_ATTENTION_CUDNN_GRAPH_H_
