// The CUDA platform of flash attention.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_H_

#include <memory>

#include "absl/status/status.h"
#include "core/kernel.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve {

// The CUDA implementation of flash_attention forward (platform kCuda): f16 and bf16 at head
// dims 32, 64, 96, 128 and 256, with every option of the contract, with the configs of
// cuda/flash_attention_config.h; Supports refuses other problems, naming what is missing.
// Streams, uploads and timing as for every CUDA run (kernels/runtime/cuda/cuda_run.h).
// Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionCuda();

// The cudnn platform (kCudnn) of flash_attention forward: cuDNN's SDPA through cudnn-frontend
// graphs, for the problems cudnn::CheckCudnnFlashRules and cuDNN's own support check accept;
// configs are cuDNN's plans. Add it only where cudnn::LoadCudnn() succeeded. Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionCudnn();

// The GPU "auto" of flash_attention forward (Kernel::SetGpuAutoImpl): the own kernels' configs
// and cuDNN's plans (configs of platform "cudnn", cudnn/flash_attention_cudnn_config.h) as one
// candidate space; the heuristic picks cuDNN's first plan by the measured rule
// (cudnn::PreferCudnn: Hopper, without a bias) or where the own kernel lacks the problem, else
// the own kernel's. Set it only where cudnn::LoadCudnn() succeeded. Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionGpuAuto();

namespace cuda {

// OK when the CUDA kernel runs `problem`; otherwise Unimplemented naming what it lacks (f32
// inputs, a head dim other than 32, 64, 96, 128 and 256, more than 65535 heads or sequences).
// Every option of the contract (causal, window, soft cap, scale, GQA/MQA, bias, segment ids,
// varlen, lse) is covered for f16 and bf16 at the compiled head dims. Thread-safe.
absl::Status CheckFlashProblemSupported(const FlashAttentionProblem& problem);

}  // namespace cuda
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_CUDA_H_
