// The template instances of LaunchFlashAttention that are compiled, one list per head dim. The
// .cu file of each head dim instantiates its list and the dispatch switch names every list, so
// the two cannot disagree; flash_attention_config.cc offers only these configs (a test checks).
//
// KS_FLASH_INSTANCES_D<D>(X) calls X(DTYPE, CTYPE, D, BLOCK_Q, BLOCK_K, WARPS, STAGES) once per
// instance: DTYPE a DType enumerator name, CTYPE the CUDA element type, BLOCK_Q = 16 * WARPS.
#ifndef KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_INSTANCES_H_
#define KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_INSTANCES_H_

// Per dtype: 4 warps x 64 rows and 8 warps x 128 rows, each with two key tile sizes and two
// stages; 4 warps x 64 rows with the larger key tile and three stages too.
#define KS_FLASH_SHAPES_(X, DT, CT, D, BK_SMALL, BK_LARGE) \
  X(DT, CT, D, 64, BK_SMALL, 4, 2)                         \
  X(DT, CT, D, 64, BK_LARGE, 4, 2)                         \
  X(DT, CT, D, 64, BK_LARGE, 4, 3)                         \
  X(DT, CT, D, 128, BK_SMALL, 8, 2)                        \
  X(DT, CT, D, 128, BK_LARGE, 8, 2)
#define KS_FLASH_INSTANCES_D64(X)                \
  KS_FLASH_SHAPES_(X, kF16, __half, 64, 64, 128) \
  KS_FLASH_SHAPES_(X, kBF16, __nv_bfloat16, 64, 64, 128)
#define KS_FLASH_INSTANCES_D128(X)               \
  KS_FLASH_SHAPES_(X, kF16, __half, 128, 32, 64) \
  KS_FLASH_SHAPES_(X, kBF16, __nv_bfloat16, 128, 32, 64)
#define KS_FOR_EACH_FLASH_INSTANCE(X) KS_FLASH_INSTANCES_D64(X) KS_FLASH_INSTANCES_D128(X)

#endif  // KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_INSTANCES_H_
