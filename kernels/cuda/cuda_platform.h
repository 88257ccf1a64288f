// The CUDA platform: the GPUs this process can use and the CUDA implementation of mean
// pooling. No CUDA types here, so any part of the project may include it (in builds with
// CUDA; kernels/register.cc guards it with KERNELSERVE_WITH_CUDA).
#ifndef KERNELSERVE_KERNELS_CUDA_CUDA_PLATFORM_H_
#define KERNELSERVE_KERNELS_CUDA_CUDA_PLATFORM_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/kernel.h"

namespace kernelserve {

// One DeviceInfo per visible CUDA device, in ordinal order: platform kCuda, the ordinal, a
// fingerprint (kind "gpu", name, compute capability, SM count, memory, driver and runtime
// versions), total memory and the opt-in shared memory per block. Empty when there is no
// driver, no GPU or any query fails; never fails hard. Thread-safe.
std::vector<DeviceInfo> EnumerateCudaDevices();

// Device memory of CUDA device `ordinal` as {used, total} bytes (used = total - free, as the
// driver reports it; memory cached in this process's pool counts as used).
// InvalidArgument for an ordinal that does not exist; Unavailable without a driver or GPU.
// Thread-safe.
absl::StatusOr<std::pair<int64_t, int64_t>> CudaMemoryInfo(int ordinal);

// The CUDA implementation of mean_pooling (platform kCuda), for MeanPoolingKernel::AddImpl.
// It runs every form of the contract (dense, masked, varlen) for f32, f16 and bf16 with the
// configs of kernels/cuda/mean_pooling_config.h. Each calling thread gets its own stream per
// device; Prepare uploads through a pinned staging buffer into memory from the device's
// caching pool; Launch times the kernel with CUDA events. Thread-safe.
std::unique_ptr<PlatformImpl> MakeCudaMeanPooling();

// The CUDA implementation of flash_attention forward (platform kCuda), for
// FlashAttentionKernel::AddImpl. f16 and bf16 at head dims 32, 64, 96, 128 and 256, with every
// option of the contract, with the configs of kernels/cuda/flash_attention_config.h; other inputs:
// Supports false and Prepare Unimplemented naming what is missing. Streams, uploads and timing as
// for mean pooling. Thread-safe.
std::unique_ptr<PlatformImpl> MakeCudaFlashAttention();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_CUDA_PLATFORM_H_
