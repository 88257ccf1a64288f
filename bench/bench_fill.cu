#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "bench/bench_fill.h"

namespace kernelserve::bench {
namespace {

// splitmix64: a well-mixed 64-bit hash of the index.
__device__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillKernel(void* data, int64_t count, int type, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const float u = static_cast<float>(Mix(seed ^ (i * 0x632be59bd9b4e019ull)) >> 40) *
                    (1.0f / 16777216.0f);  // [0, 1)
    const float v = u * 2.0f - 0.5f;
    if (type == 0) {
      static_cast<float*>(data)[i] = v;
    } else if (type == 1) {
      static_cast<__half*>(data)[i] = __float2half_rn(v);
    } else if (type == 2) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<__nv_fp8_storage_t*>(data)[i] =
          __nv_cvt_float_to_fp8(v, __NV_SATFINITE, type == 3 ? __NV_E4M3 : __NV_E5M2);
    }
  }
}

__global__ void EmptyKernel() {}

}  // namespace

cudaError_t LaunchEmpty(cudaStream_t stream) {
  EmptyKernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t FillRandom(void* data, int64_t count, FillType type, uint64_t seed,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, 65536);
  FillKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(data, count, static_cast<int>(type),
                                                                seed);
  return cudaGetLastError();
}

}  // namespace kernelserve::bench
