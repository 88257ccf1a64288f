// Hopper (sm_90a) synchronization and data-movement primitives of the warp-specialized flash
// attention kernels (the backward of flash_attention_bwd_wgmma.cuh, the forward of
// flash_attention_ws.cuh): acquire/release flags in global memory, named barriers between the
// roles of a block, register reallocation between warpgroups, mbarriers, tensor (TMA) loads
// and the bulk reduction of a shared-memory tile into global memory.
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

// An mbarrier in shared memory (8 bytes at `bar`). BarrierInit sets its arrival count (one
// thread, before any use; FenceBarrierInit and a block-wide sync make it visible to the other
// threads and to the tensor memory accelerator). A phase completes when `count` arrivals and
// every byte announced by BarrierExpectBytes (which counts as one arrival) have landed.
// BarrierWait(bar, parity) returns once the phase of that parity has completed: a fresh
// barrier is in phase 0, so waiting for parity 1 returns at once (the "previous" phase).
__device__ __forceinline__ void BarrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void BarrierExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void BarrierWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Starts a tensor-memory-accelerator copy of one box of the 3-d tensor `map` (a kernel
// parameter: __grid_constant__) at coordinates (c0, c1, c2), innermost first, into shared
// memory at `dst`; its bytes count toward the phase of mbarrier `bar`. Out-of-bounds elements
// land as zeros. REQUIRES: dst aligned as the map's swizzle needs (1024 bytes for 128B).
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const void* map, int c0, int c1, int c2,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_HOPPER_SYNC_CUH_
