// The CPU platform of flash attention's backward: the reference implementation
// (FlashAttentionBwdCpu), its configs and runs.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_CPU_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_CPU_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve {

// Configs: block_q, block_k (tiles; 0 = the default) and threads (the named field: worker threads,
// 0 = one per hardware thread), within the limits of cpu/flash_attention_bwd.h. None changes the
// results' bits. Heuristic: query tiles of 16 rows for sequences up to 16, else 32; key tiles of 64
// up to D = 64, else 32; one thread below 2^22 multiply-adds (about 7 per query, key and dim), else
// every hardware thread.
// Candidates: block_q in {16, 32, 64} x block_k in {32, 64, 128} x threads in {1, 2,
// hardware threads}. Runs every problem of the contract.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCpu();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_CPU_H_
