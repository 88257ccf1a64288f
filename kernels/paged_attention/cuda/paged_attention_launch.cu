// LaunchPagedAppend, PagedWorkspaceBytes (the attention launchers' instances are in the
// paged_attention_hdim*.cu files).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/paged_attention/cuda/paged_attention_device.cuh"
#include "kernels/paged_attention/cuda/paged_attention_instances.h"
#include "kernels/paged_attention/cuda/paged_attention_launch.h"

namespace kernelserve::cuda {
namespace paged {

constexpr int kAppendThreads = 256;
// Enough blocks to fill an H100 several times over; the grid strides past that.
constexpr int64_t kAppendMaxBlocks = 132 * 16;

// kVec elements of T as the cache's TC: copied as they are when TC is T; quantized to fp8 as
// fp8(x / scale) otherwise (float division, saturating round-to-nearest-even: the contract's
// rounding, which the cpu reference repeats bit for bit).
template <typename T, typename TC, int kVec>
struct AppendVec {
  using In = std::conditional_t<kVec == 8, uint4, T>;
  using Out = std::conditional_t<std::is_same_v<T, TC>, In,
                                 std::conditional_t<kVec == 8, uint2, __nv_fp8_storage_t>>;
  __device__ __forceinline__ static Out Convert(const In& in, float scale) {
    if constexpr (std::is_same_v<T, TC>) {
      return in;
    } else {
      const T* x = reinterpret_cast<const T*>(&in);
      alignas(8) __nv_fp8_storage_t q[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        q[j] = __nv_cvt_float_to_fp8(__fdiv_rn(static_cast<float>(x[j]), scale), __NV_SATFINITE,
                                     CacheKind<TC>::kInterpretation);
      }
      return *reinterpret_cast<const Out*>(q);
    }
  }
};

// One vector of kVec elements (16 bytes, or 1 element when D is not a multiple of 8) of new k
// and v per step; `vectors` = B * Sq * Hkv * D / kVec. Writes are to distinct slots (positions
// L - Sq .. L - 1 of each sequence), so no two threads touch the same element.
template <typename T, typename TC, int kVec>
__global__ void __launch_bounds__(kAppendThreads)
    PagedAppendKernel(const __grid_constant__ PagedAppendArgs a, int64_t vectors) {
  using Vec = AppendVec<T, TC, kVec>;
  const int64_t per_row = a.head_dim / kVec;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = v % per_row;
    const int64_t row = v / per_row;  // (b * Sq + i) * Hkv + h
    const int64_t h = row % a.num_heads_kv;
    const int64_t bi = row / a.num_heads_kv;
    const int64_t i = bi % a.seq_len_q;
    const int64_t b = bi / a.seq_len_q;
    const int64_t len = a.cache_seqlens[b];
    const int64_t pos = len - a.seq_len_q + i;
    if (len == 0 || pos < 0) continue;  // no new tokens for an empty sequence
    const int64_t page = a.block_table[b * a.max_pages + pos / a.page_size];
    const int64_t slot = page * a.page_size + pos % a.page_size;
    const int64_t dst = (slot * a.num_heads_kv + h) * per_row + col;
    const int64_t src = row * per_row + col;
    const float k_scale = a.k_scale != nullptr ? a.k_scale[h] : 1.0f;
    const float v_scale = a.v_scale != nullptr ? a.v_scale[h] : 1.0f;
    using In = typename Vec::In;
    using Out = typename Vec::Out;
    static_cast<Out*>(a.k_cache)[dst] = Vec::Convert(static_cast<const In*>(a.k)[src], k_scale);
    static_cast<Out*>(a.v_cache)[dst] = Vec::Convert(static_cast<const In*>(a.v)[src], v_scale);
  }
}

template <typename T, typename TC, int kVec>
cudaError_t LaunchAppend(const PagedAppendArgs& args, cudaStream_t stream) {
  const int64_t vectors = args.batch * args.seq_len_q * args.num_heads_kv * args.head_dim / kVec;
  if (vectors == 0) return cudaSuccess;
  const int64_t blocks =
      std::min<int64_t>(kAppendMaxBlocks, (vectors + kAppendThreads - 1) / kAppendThreads);
  PagedAppendKernel<T, TC, kVec>
      <<<static_cast<unsigned>(blocks), kAppendThreads, 0, stream>>>(args, vectors);
  return cudaGetLastError();
}

}  // namespace paged

size_t PagedWorkspaceBytes(const PagedDeviceArgs& args, int head_dim, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(args.batch * args.num_heads_q * args.seq_len_q) *
                      static_cast<size_t>(num_splits);
  return paged::AlignUp(rows * static_cast<size_t>(head_dim) * sizeof(float)) +
         paged::AlignUp(rows * sizeof(float));
}

template <typename T, typename TC>
cudaError_t LaunchPagedAppend(const PagedAppendArgs& args, cudaStream_t stream) {
  if (args.batch < 0 || args.seq_len_q < 0 || args.num_heads_kv < 0 || args.head_dim < 0 ||
      args.page_size <= 0 || args.max_pages < 0) {
    return cudaErrorInvalidValue;
  }
  // 16-byte vectors need every row to start 16-byte aligned: D a multiple of 8.
  if (args.head_dim % 8 == 0) return paged::LaunchAppend<T, TC, 8>(args, stream);
  return paged::LaunchAppend<T, TC, 1>(args, stream);
}

#define KS_INSTANTIATE_PAGED_APPEND(DT, CT, CDT, CCT) \
  template cudaError_t LaunchPagedAppend<CT, CCT>(const PagedAppendArgs& args, cudaStream_t stream);
KS_FOR_EACH_PAGED_CACHE_TYPE(KS_INSTANTIATE_PAGED_APPEND)
#undef KS_INSTANTIATE_PAGED_APPEND

}  // namespace kernelserve::cuda
