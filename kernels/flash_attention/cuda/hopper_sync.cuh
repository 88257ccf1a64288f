// Hopper (sm_90a) synchronization and data-movement primitives of the warp-specialized flash
// attention backward kernel (flash_attention_bwd_wgmma.cuh): acquire/release flags in global
// memory, named barriers between the roles of a block, register reallocation between
// warpgroups and the bulk (TMA) reduction of a shared-memory tile into global memory.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_HOPPER_SYNC_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_HOPPER_SYNC_CUH_

#include <cstdint>

namespace kernelserve::cuda::flash {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A flag in global memory: LoadRelaxed reads it (coherent at the GPU's scope, no ordering),
// FenceAcquire after it orders later accesses after what it saw, StoreRelease writes it after
// every earlier access.
__device__ __forceinline__ int LoadRelaxed(const int* address) {
  int value;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}
__device__ __forceinline__ void FenceAcquire() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}
__device__ __forceinline__ void StoreRelease(int* address, int value) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}
__device__ __forceinline__ void StoreShared32(uint32_t address, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
__device__ __forceinline__ void StoreShared64(uint32_t address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(x), "f"(y) : "memory");
}

// Named barrier `id` (1-15; 0 is __syncthreads's) of `threads` threads (a multiple of 32).
// BarSync waits until that many threads arrived (its own warp included); BarArrive counts its
// warp in and goes on. Writes before an arrival are visible to the threads past the sync.
__device__ __forceinline__ void BarSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void BarArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Lowers (raises) this warpgroup's registers per thread to kRegisters, a multiple of 8 in
// [24, 256]. REQUIRES: every warp of the warpgroup executes it.
template <int kRegisters>
__device__ __forceinline__ void ReleaseRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void ClaimRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// dst[0, bytes) += src[0, bytes) in fp32, by the tensor memory accelerator (one bulk
// operation). BulkWaitRead waits until the source of this thread's bulk operations has been
// read (the shared memory may be reused), BulkWaitComplete until their writes are done.
// REQUIRES: bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void BulkReduceAdd(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void BulkWaitComplete() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_HOPPER_SYNC_CUH_
