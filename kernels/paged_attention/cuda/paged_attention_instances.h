// The template instances of LaunchPagedAttention and LaunchPagedAppend that are compiled: q in
// f16 or bf16 with caches of q's dtype, f8_e4m3 or f8_e5m2; head dims 64, 128 and 256 (one .cu
// file each); the warp counts of kPagedNumWarps. One list, used by the .cu files (explicit
// instantiation) and by the dispatch switch, so the two cannot disagree. The split count is a
// run-time argument and multiplies nothing here.
//
// KS_FOR_EACH_PAGED_CACHE_TYPE(X) calls X(DTYPE, CTYPE, CACHE_DTYPE, CACHE_CTYPE) once per pair
// of q's and the caches' types: DType enumerator names and the CUDA element types.
// KS_FOR_EACH_PAGED_INSTANCE(X) calls X(DTYPE, CTYPE, CACHE_DTYPE, CACHE_CTYPE, HEAD_DIM, WARPS)
// once per attention instance; KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, HEAD_DIM) lists those of one
// head dim.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_

#define KS_FOR_EACH_PAGED_CACHE_TYPE_OF(X, DT, CT) \
  X(DT, CT, DT, CT) X(DT, CT, kF8E4M3, __nv_fp8_e4m3) X(DT, CT, kF8E5M2, __nv_fp8_e5m2)
#define KS_FOR_EACH_PAGED_CACHE_TYPE(X)            \
  KS_FOR_EACH_PAGED_CACHE_TYPE_OF(X, kF16, __half) \
  KS_FOR_EACH_PAGED_CACHE_TYPE_OF(X, kBF16, __nv_bfloat16)

#define KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, D)         \
  X(kF16, __half, kF16, __half, D, 4)                   \
  X(kF16, __half, kF8E4M3, __nv_fp8_e4m3, D, 4)         \
  X(kF16, __half, kF8E5M2, __nv_fp8_e5m2, D, 4)         \
  X(kBF16, __nv_bfloat16, kBF16, __nv_bfloat16, D, 4)   \
  X(kBF16, __nv_bfloat16, kF8E4M3, __nv_fp8_e4m3, D, 4) \
  X(kBF16, __nv_bfloat16, kF8E5M2, __nv_fp8_e5m2, D, 4)
#define KS_FOR_EACH_PAGED_INSTANCE(X)       \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 64)  \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 128) \
  KS_FOR_EACH_PAGED_INSTANCE_OF_DIM(X, 256)

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_INSTANCES_H_
