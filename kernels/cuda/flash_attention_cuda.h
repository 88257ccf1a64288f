// Support for the CUDA flash attention runs (see MakeCudaFlashAttention in cuda_platform.h):
// what the GPU kernel covers, and output poisoning for tests.
#ifndef KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_CUDA_H_
#define KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_CUDA_H_

#include "absl/status/status.h"
#include "core/kernel.h"
#include "kernels/flash_attention_kernel.h"

namespace kernelserve::cuda {

// OK when the CUDA kernel runs `problem`; otherwise Unimplemented naming what it lacks (f32
// inputs, a head dim other than 32, 64, 96, 128 and 256, more than 65535 heads or sequences). Every
// option of the contract (causal, window, soft cap, scale, GQA/MQA, bias, segment ids, varlen, lse)
// is covered for f16 and bf16 at the compiled head dims. Thread-safe.
absl::Status CheckFlashProblemSupported(const FlashAttentionProblem& problem);

// Fills the device outputs of `run` (made by MakeCudaFlashAttention()->Prepare) with all-ones
// bytes, a NaN in f16, bf16 and f32, and waits; an element the next Launch leaves unwritten then
// shows. InvalidArgument when `run` comes from another implementation. Not thread-safe (like
// the run).
absl::Status PoisonFlashAttentionOutputs(PreparedRun& run);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_CUDA_H_
