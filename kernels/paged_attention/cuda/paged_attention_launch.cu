// LaunchPagedAppend, PagedWorkspaceBytes (the attention launchers' instances are in the
// paged_attention_hdim*.cu files).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/paged_attention/cuda/fast_divisor.h"
#include "kernels/paged_attention/cuda/paged_attention_device.cuh"
#include "kernels/paged_attention/cuda/paged_attention_instances.h"
#include "kernels/paged_attention/cuda/paged_attention_launch.h"

namespace kernelserve::cuda {
namespace paged {

constexpr int kAppendThreads = 256;
// Enough blocks to fill an H100 several times over; the grid strides past that.
constexpr int64_t kAppendMaxBlocks = 132 * 16;

// x / scale rounded to float as the division rounds it (round-to-nearest-even), from y, the
// correctly rounded 1 / scale, without a division per element: q = x * y is within an ulp of the
// quotient, the residual x - q * scale is exact in an FMA, and q + residual * y rounds to the
// quotient (Markstein's correction). REQUIRES: 2^-60 <= scale <= 2^60 (the residual then stays
// a normal float wherever the quotient is at least 2^-20; below that every fp8 code is a signed
// zero, and the sign is q's). Infinite or NaN x keeps q (x * y).
__device__ __forceinline__ float DivideByScale(float x, float scale, float y) {
  const float q = x * y;
  const float r = fmaf(-q, scale, x);
  return isfinite(q) ? copysignf(fmaf(r, y, q), q) : q;
}

// Scales that DivideByScale takes; others divide element by element.
__device__ __forceinline__ bool ReciprocalScale(float scale) {
  return scale >= 0x1p-60f && scale <= 0x1p60f;
}

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
      // One reciprocal for the vector (the scale is its head's): a division per element took
      // most of the loop's instructions, which bound the fp8 append below copy speed.
      if (ReciprocalScale(scale)) {
        const float y = __frcp_rn(scale);
        return Quantize(in, [&](float v) { return DivideByScale(v, scale, y); });
      }
      return Quantize(in, [&](float v) { return __fdiv_rn(v, scale); });
    }
  }

  // The elements of `in` as fp8(quotient(x)).
  template <typename Quotient>
  __device__ __forceinline__ static Out Quantize(const In& in, Quotient quotient) {
    const T* x = reinterpret_cast<const T*>(&in);
    if constexpr (kVec % 2 == 0) {
      // Two values a conversion (one instruction from sm_89 on), the same rounding.
      alignas(8) __nv_fp8x2_storage_t q[kVec / 2];
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const float2 pair = make_float2(quotient(static_cast<float>(x[2 * j])),
                                        quotient(static_cast<float>(x[2 * j + 1])));
        q[j] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, CacheKind<TC>::kInterpretation);
      }
      return *reinterpret_cast<const Out*>(q);
    } else {
      return __nv_cvt_float_to_fp8(quotient(static_cast<float>(x[0])), __NV_SATFINITE,
                                   CacheKind<TC>::kInterpretation);
    }
  }
};

// The divisors that split a vector's index, for the 32-bit loop.
struct AppendDivisors {
  FastDivisor per_row;    // D / kVec
  FastDivisor heads;      // Hkv
  FastDivisor seq_len_q;  // Sq
  FastDivisor page_size;
};

// (q, r) = (n / d, n % d): by `fast` in the 32-bit loop, by the division itself in 64 bits.
template <typename Index>
__device__ __forceinline__ void DivMod(Index n, int64_t d, const FastDivisor& fast, Index& q,
                                       Index& r) {
  if constexpr (std::is_same_v<Index, uint32_t>) {
    q = fast.Div(n);
    r = n - q * fast.divisor;
  } else {
    q = n / static_cast<Index>(d);
    r = n - q * static_cast<Index>(d);
  }
}

// One vector of kVec elements (16 bytes, or 1 element when D is not a multiple of 8) of new k
// and v per step; `vectors` = B * Sq * Hkv * D / kVec. Writes are to distinct slots (positions
// L - Sq .. L - 1 of each sequence), so no two threads touch the same element. Index: the type
// that splits a vector's index into (b, i, h, column), uint32_t where `vectors` fits in it,
// split by `div` then (a 64-bit division is a long software sequence, a 32-bit one about twenty
// instructions, several per vector: most of the kernel's instructions); the destination is
// always computed in 64 bits.
template <typename T, typename TC, int kVec, typename Index>
__global__ void __launch_bounds__(kAppendThreads)
    PagedAppendKernel(const __grid_constant__ PagedAppendArgs a, const AppendDivisors div,
                      Index vectors) {
  using Vec = AppendVec<T, TC, kVec>;
  const int64_t per_row = a.head_dim / kVec;
  for (Index v = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += static_cast<Index>(gridDim.x) * blockDim.x) {
    Index row, col, bi, h, b, i;
    DivMod<Index>(v, per_row, div.per_row, row, col);  // row = (b * Sq + i) * Hkv + h
    DivMod<Index>(row, a.num_heads_kv, div.heads, bi, h);
    DivMod<Index>(bi, a.seq_len_q, div.seq_len_q, b, i);
    // The new values and scales first: their loads do not wait on the length and the page
    // table's, which each wait on the one before.
    using In = typename Vec::In;
    using Out = typename Vec::Out;
    const int64_t src = static_cast<int64_t>(row) * per_row + col;
    const In k_in = static_cast<const In*>(a.k)[src];
    const In v_in = static_cast<const In*>(a.v)[src];
    const float k_scale = a.k_scale != nullptr ? a.k_scale[h] : 1.0f;
    const float v_scale = a.v_scale != nullptr ? a.v_scale[h] : 1.0f;
    const int len = a.cache_seqlens[b];
    const int pos = len - static_cast<int>(a.seq_len_q) + static_cast<int>(i);
    if (len == 0 || pos < 0) continue;  // no new tokens for an empty sequence
    uint32_t page_index, in_page;
    DivMod<uint32_t>(static_cast<uint32_t>(pos), a.page_size, div.page_size, page_index, in_page);
    const int64_t page = a.block_table[static_cast<int64_t>(b) * a.max_pages + page_index];
    const int64_t slot = page * a.page_size + in_page;
    const int64_t dst = (slot * a.num_heads_kv + h) * per_row + col;
    static_cast<Out*>(a.k_cache)[dst] = Vec::Convert(k_in, k_scale);
    static_cast<Out*>(a.v_cache)[dst] = Vec::Convert(v_in, v_scale);
  }
}

template <typename T, typename TC, int kVec>
cudaError_t LaunchAppend(const PagedAppendArgs& args, cudaStream_t stream) {
  const int64_t vectors = args.batch * args.seq_len_q * args.num_heads_kv * args.head_dim / kVec;
  if (vectors == 0) return cudaSuccess;
  const int64_t blocks =
      std::min<int64_t>(kAppendMaxBlocks, (vectors + kAppendThreads - 1) / kAppendThreads);
  // The 32-bit loop's last stride must not wrap: vectors + the grid's threads < 2^32.
  // The page split is always 32-bit (page_size <= INT32_MAX, checked by the caller).
  AppendDivisors div;
  div.page_size = FastDivisor::Of(static_cast<uint32_t>(args.page_size));
  if (vectors + blocks * kAppendThreads <= int64_t{UINT32_MAX}) {
    // Each divisor is at most `vectors` here (which is their product times B), so 32-bit.
    div.per_row = FastDivisor::Of(static_cast<uint32_t>(args.head_dim / kVec));
    div.heads = FastDivisor::Of(static_cast<uint32_t>(args.num_heads_kv));
    div.seq_len_q = FastDivisor::Of(static_cast<uint32_t>(args.seq_len_q));
    PagedAppendKernel<T, TC, kVec, uint32_t>
        <<<static_cast<unsigned>(blocks), kAppendThreads, 0, stream>>>(
            args, div, static_cast<uint32_t>(vectors));
  } else {
    PagedAppendKernel<T, TC, kVec, int64_t>
        <<<static_cast<unsigned>(blocks), kAppendThreads, 0, stream>>>(args, div, vectors);
  }
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
      args.page_size <= 0 || args.page_size > INT32_MAX || args.max_pages < 0) {
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
