// The template instances of LaunchPagedAttention that are compiled: f16 and bf16, head dims 64,
// 128 and 256 (one .cu file each), the warp counts of kPagedNumWarps. One list, used by the .cu
// files (explicit instantiation) and by the dispatch switch, so the two cannot disagree. The
// split count is a run-time argument and multiplies nothing here.
//
// KS_FOR_EACH_PAGED_INSTANCE(X) calls X(DTYPE, CTYPE, HEAD_DIM, WARPS) once per instance: DTYPE a
// DType enumerator name, CTYPE the CUDA element type of q, out and the caches.
// KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, HEAD_DIM) lists those of one head dim.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_

// TODO(issue 36): fp8 caches add a cache element type here (and to the dispatch key).
#define KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, D) X(kF16, __half, D, 4) X(kBF16, __nv_bfloat16, D, 4)
#define KS_FOR_EACH_PAGED_INSTANCE(X)       \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 64)  \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 128) \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 256)

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_
