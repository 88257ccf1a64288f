// The template instances of the flash attention backward launcher that are compiled, one list
// per head dim. The .cu file of each head dim instantiates its list and the dispatch switch
// names every list, so the two cannot disagree; flash_attention_bwd_config.cc offers only
// these configs (a test checks).
//
// KS_FLASH_BWD_INSTANCES_D<D>(X) calls X(ALGO, DTYPE, CTYPE, D, BLOCK_Q, BLOCK_K) once per
// instance: ALGO is Mma (LaunchFlashAttentionBwdMma, any sm_80+ GPU) or Wgmma
// (LaunchFlashAttentionBwdWgmma, Hopper only, compiled when the build targets sm_90a); DTYPE a
// DType enumerator name, CTYPE the CUDA element type.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_INSTANCES_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_INSTANCES_H_

// Per dtype: query tiles of 64 rows with key tiles of 64 (4 warps in both kernels) and of 128
// (8 warps for dK/dV, 4 for dQ). Larger query tiles would hold 2 x 16 x 128 fp32 values of S
// and dP per warp of the dK/dV kernel beside its dK and dV accumulators: past 255 registers
// at D = 128.
//
// wgmma: query tiles of 64 rows, key tiles of 128 (two consumer warpgroups of 64 keys).
#if defined(KERNELSERVE_FLASH_WGMMA)
#define KS_FLASH_BWD_WGMMA_(X, DT, CT, D) X(Wgmma, DT, CT, D, 64, 128)
#else
#define KS_FLASH_BWD_WGMMA_(X, DT, CT, D)
#endif
#define KS_FLASH_BWD_SHAPES_(X, DT, CT, D) \
  X(Mma, DT, CT, D, 64, 64) X(Mma, DT, CT, D, 64, 128) KS_FLASH_BWD_WGMMA_(X, DT, CT, D)

#define KS_FLASH_BWD_INSTANCES_D64(X)       \
  KS_FLASH_BWD_SHAPES_(X, kF16, __half, 64) \
  KS_FLASH_BWD_SHAPES_(X, kBF16, __nv_bfloat16, 64)
#define KS_FLASH_BWD_INSTANCES_D128(X)       \
  KS_FLASH_BWD_SHAPES_(X, kF16, __half, 128) \
  KS_FLASH_BWD_SHAPES_(X, kBF16, __nv_bfloat16, 128)

#define KS_FOR_EACH_FLASH_BWD_INSTANCE(X) \
  KS_FLASH_BWD_INSTANCES_D64(X) KS_FLASH_BWD_INSTANCES_D128(X)

// For the .cu files: the explicit instantiation of one launcher, used as
// KS_FLASH_BWD_INSTANCES_D<D>(KS_INSTANTIATE_FLASH_BWD) inside namespace kernelserve::cuda.
#define KS_INSTANTIATE_FLASH_BWD(ALGO, DT, CT, D, BQ, BK)            \
  template cudaError_t LaunchFlashAttentionBwd##ALGO<CT, D, BQ, BK>( \
      const FlashBwdDeviceArgs& args, cudaStream_t stream);

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_INSTANCES_H_
