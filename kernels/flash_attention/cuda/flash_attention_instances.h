// The template instances of the flash attention launchers that are compiled, one list per head
// dim. The .cu file of each head dim instantiates its list and the dispatch switch names every
// list, so the two cannot disagree; flash_attention_config.cc offers only these configs (a test
// checks).
//
// KS_FLASH_INSTANCES_D<D>(X) calls X(ALGO, DTYPE, CTYPE, D, BLOCK_Q, BLOCK_K, WARPS, STAGES)
// once per instance: ALGO is Mma (LaunchFlashAttentionMma, any sm_80+ GPU, BLOCK_Q = 16 * WARPS),
// Wgmma (LaunchFlashAttentionWgmma, Hopper only, compiled when the build targets sm_90a;
// BLOCK_Q = 64 query rows per warpgroup of 4 warps) or Ws / WsPp (the warp-specialized Hopper
// kernel, BLOCK_Q = 64 per consumer warpgroup, WARPS counting the producer's 4 too); DTYPE a
// DType enumerator name, CTYPE the CUDA element type.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_INSTANCES_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_INSTANCES_H_

// mma.sync, per dtype: 4 warps x 64 rows and 8 warps x 128 rows, each with two key tile sizes
// and two stages; 4 warps x 64 rows with the larger key tile and three stages too.
#define KS_FLASH_MMA_SHAPES_(X, DT, CT, D, BK_SMALL, BK_LARGE) \
  X(Mma, DT, CT, D, 64, BK_SMALL, 4, 2)                        \
  X(Mma, DT, CT, D, 64, BK_LARGE, 4, 2)                        \
  X(Mma, DT, CT, D, 64, BK_LARGE, 4, 3)                        \
  X(Mma, DT, CT, D, 128, BK_SMALL, 8, 2)                       \
  X(Mma, DT, CT, D, 128, BK_LARGE, 8, 2)

// wgmma, per dtype (its pipeline needs 3 stages or more): two warpgroups (128 rows) with key
// tiles of 128 (3 stages) and 64 (3 and 4 stages); one warpgroup (64 rows) with key tiles of 128.
// D = 96 (rows padded to 128 in shared memory): the shapes the heuristic takes at D = 64 and
// D = 128, and two warpgroups with key tiles of 64 (fewer registers). D = 256: one warpgroup
// with key tiles of 64 and 3 stages, the one shape whose Q, K and V tiles fit a Hopper block's
// shared memory (225 of 227 KiB).
//
// Warp-specialized (Ws, WsPp: a producer warpgroup and two consumer warpgroups, 12 warps x 128
// query rows): key tiles of 128 and 2 stages up to D = 128 (D = 96 padded to 128), key tiles
// of 64 at D = 256. Three stages were no faster at D = 128 (H200).
#if defined(KERNELSERVE_FLASH_WGMMA)
#define KS_FLASH_WS_(X, DT, CT, D, BK, STAGES) \
  X(Ws, DT, CT, D, 128, BK, 12, STAGES)        \
  X(WsPp, DT, CT, D, 128, BK, 12, STAGES)
#define KS_FLASH_WGMMA_SHAPES_(X, DT, CT, D) \
  X(Wgmma, DT, CT, D, 128, 128, 8, 3)        \
  X(Wgmma, DT, CT, D, 128, 64, 8, 3)         \
  X(Wgmma, DT, CT, D, 128, 64, 8, 4)         \
  X(Wgmma, DT, CT, D, 64, 128, 4, 3)         \
  KS_FLASH_WS_(X, DT, CT, D, 128, 2)
#define KS_FLASH_WGMMA_D96_(X, DT, CT) \
  X(Wgmma, DT, CT, 96, 128, 128, 8, 3) \
  X(Wgmma, DT, CT, 96, 128, 64, 8, 3)  \
  X(Wgmma, DT, CT, 96, 64, 128, 4, 3) KS_FLASH_WS_(X, DT, CT, 96, 128, 2)
#define KS_FLASH_WGMMA_D256_(X, DT, CT) \
  X(Wgmma, DT, CT, 256, 64, 64, 4, 3) KS_FLASH_WS_(X, DT, CT, 256, 64, 2)
#else
#define KS_FLASH_WGMMA_SHAPES_(X, DT, CT, D)
#define KS_FLASH_WGMMA_D96_(X, DT, CT)
#define KS_FLASH_WGMMA_D256_(X, DT, CT)
#endif

#define KS_FLASH_SHAPES_(X, DT, CT, D, BK_SMALL, BK_LARGE) \
  KS_FLASH_MMA_SHAPES_(X, DT, CT, D, BK_SMALL, BK_LARGE)   \
  KS_FLASH_WGMMA_SHAPES_(X, DT, CT, D)

#define KS_FLASH_INSTANCES_D64(X)                \
  KS_FLASH_SHAPES_(X, kF16, __half, 64, 64, 128) \
  KS_FLASH_SHAPES_(X, kBF16, __nv_bfloat16, 64, 64, 128)
#define KS_FLASH_INSTANCES_D128(X)               \
  KS_FLASH_SHAPES_(X, kF16, __half, 128, 32, 64) \
  KS_FLASH_SHAPES_(X, kBF16, __nv_bfloat16, 128, 32, 64)
// Head dims 32, 96 and 256 on mma.sync: 4 warps x 64 rows, two key tile sizes, 2 stages.
#define KS_FLASH_SMALL_SHAPES_(X, DT, CT, D, BK_SMALL, BK_LARGE) \
  X(Mma, DT, CT, D, 64, BK_SMALL, 4, 2)                          \
  X(Mma, DT, CT, D, 64, BK_LARGE, 4, 2)
#define KS_FLASH_INSTANCES_D32(X)                      \
  KS_FLASH_SMALL_SHAPES_(X, kF16, __half, 32, 64, 128) \
  KS_FLASH_SMALL_SHAPES_(X, kBF16, __nv_bfloat16, 32, 64, 128)
#define KS_FLASH_INSTANCES_D96(X)                             \
  KS_FLASH_SMALL_SHAPES_(X, kF16, __half, 96, 32, 64)         \
  KS_FLASH_SMALL_SHAPES_(X, kBF16, __nv_bfloat16, 96, 32, 64) \
  KS_FLASH_WGMMA_D96_(X, kF16, __half) KS_FLASH_WGMMA_D96_(X, kBF16, __nv_bfloat16)
#define KS_FLASH_INSTANCES_D256(X)                             \
  KS_FLASH_SMALL_SHAPES_(X, kF16, __half, 256, 32, 64)         \
  KS_FLASH_SMALL_SHAPES_(X, kBF16, __nv_bfloat16, 256, 32, 64) \
  KS_FLASH_WGMMA_D256_(X, kF16, __half) KS_FLASH_WGMMA_D256_(X, kBF16, __nv_bfloat16)

#define KS_FOR_EACH_FLASH_INSTANCE(X) \
  KS_FLASH_INSTANCES_D32(X)           \
  KS_FLASH_INSTANCES_D64(X)           \
  KS_FLASH_INSTANCES_D96(X) KS_FLASH_INSTANCES_D128(X) KS_FLASH_INSTANCES_D256(X)

// For the .cu files: the explicit instantiation of one launcher, used as
// KS_FLASH_INSTANCES_D<D>(KS_INSTANTIATE_FLASH) inside namespace kernelserve::cuda.
#define KS_INSTANTIATE_FLASH(ALGO, DT, CT, D, BQ, BK, WARPS, STAGES)             \
  template cudaError_t LaunchFlashAttention##ALGO<CT, D, BQ, BK, WARPS, STAGES>( \
      const FlashDeviceArgs& args, cudaStream_t stream);

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_INSTANCES_H_
