// The GPU platforms of flash_attention_bwd: cuda (the own kernels, cuda/flash_attention_bwd_*,
// with cuDNN's backward plans as more candidates) and cudnn (cuDNN's plans alone).
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CUDA_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CUDA_H_

#include <memory>

#include "absl/status/status.h"
#include "core/kernel.h"
#include "kernels/flash_attention/flash_attention_bwd_kernel.h"

namespace kernelserve {

// The CUDA implementation of flash_attention_bwd (platform kCuda): f16 and bf16 at head dims
// 64 and 128 with every option of the contract but dbias (causal, windows, soft cap, scale,
// GQA/MQA, bias, segment ids, varlen), deterministic, with the configs of
// cuda/flash_attention_bwd_config.h; Supports refuses other problems, naming what is missing.
// Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCuda();

// The cudnn platform (kCudnn) of flash_attention_bwd: cuDNN's SDPA backward (deterministic)
// for the problems cudnn::CheckCudnnFlashRules and cuDNN's own support check accept; configs
// are cuDNN's plans. Add it only where cudnn::LoadCudnn() succeeded. Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdCudnn();

// The GPU "auto" of flash_attention_bwd (Kernel::SetGpuAutoImpl): the own kernels' configs and
// cuDNN's backward plans (configs of platform "cudnn") as one candidate space; cuDNN serves
// what the own kernels do not where it builds a plan (other head dims; dbias, for which cuDNN
// 9.19 on an H100 built none, so it ran on the cpu platform); the heuristic picks cuDNN's first
// plan where cuDNN runs the problem and the measured rule prefers it (cudnn::PreferCudnnBackward:
// Hopper), else the own kernels. Supports refuses what neither runs, naming what is missing.
// Set it only where cudnn::LoadCudnn() succeeded. Thread-safe.
std::unique_ptr<PlatformImpl> MakeFlashAttentionBwdGpuAuto();

namespace cuda {

// OK when the own CUDA backward kernels run `problem`; otherwise Unimplemented naming what they
// lack (f32, a head dim other than 64 and 128, dbias, more than 65535 heads or sequences).
// Thread-safe.
absl::Status CheckFlashBwdProblemSupported(const FlashAttentionBwdProblem& problem);

}  // namespace cuda
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_CUDA_H_
