// Device code of CUDA mean pooling.
//
// Work split: the rows of x inside sequences (rows [0, used_rows)) are cut into chunks of
// block_rows rows, and each row's values into tiles of `lanes` lanes; block (chunk, tile) sums
// its rows. Inside a block, lane l of group g takes rows g, g + groups, ... of each sequence
// piece in the chunk, loading kStages rows before adding them. Every chunk is the same size, so
// a skewed varlen batch (lengths 1 to 100k) spreads evenly over the SMs.
//
// A sequence inside one chunk is finished by that block. A sequence spread over several chunks
// gets one float partial sum per chunk (slot 0 of a chunk: the sequence covering its first row;
// slot 1: a sequence that starts inside it and runs past its end); the block that finishes last
// (a counter per sequence and tile) adds the partials in chunk order and writes the mean. The
// order of every addition depends only on the shape and config: same input, same bits.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DEVICE_CUH_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/mean_pooling/cuda/mean_pooling_launch.h"

namespace kernelserve::cuda::pooling {

inline constexpr int kMaxBlockThreads = kPoolingKernelMaxThreads;

// Everything one launch needs, passed by value.
struct KernelParams {
  PoolingDeviceArgs args;
  int lanes = 0;       // a power of two
  int lane_shift = 0;  // log2(lanes)
  int64_t block_rows = 0;
  int64_t chunks = 0;
  int tiles = 0;
  unsigned* counters = nullptr;  // [num_sequences, tiles]
  int* counts = nullptr;         // [chunks, 2, tiles] (masked only)
  float* partials = nullptr;     // [chunks, 2, hidden]
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two floats packed into one 32-bit word of the element type (16-bit types).
template <typename T>
__device__ __forceinline__ unsigned PackPair(float lo, float hi) {
  const T pair[2] = {FromFloat<T>(lo), FromFloat<T>(hi)};
  unsigned word;
  memcpy(&word, pair, sizeof(word));
  return word;
}

// The two values of one 32-bit word of 16-bit elements, as floats.
__device__ __forceinline__ void UnpackPair(unsigned word, __nv_bfloat16*, float* out) {
  out[0] = __uint_as_float(word << 16);
  out[1] = __uint_as_float(word & 0xffff0000u);
}
__device__ __forceinline__ void UnpackPair(unsigned word, __half*, float* out) {
  __half2 pair;
  memcpy(&pair, &word, sizeof(word));
  const float2 f = __half22float2(pair);
  out[0] = f.x;
  out[1] = f.y;
}

// Loads and stores of one lane's values: a 16-byte vector (kVec > 1) or one value.
template <typename T, int kVec>
struct Io {
  static_assert(kVec * sizeof(T) == 16, "a vector lane covers 16 bytes");
  using Raw = uint4;
  __device__ static Raw Zero() { return make_uint4(0, 0, 0, 0); }
  // Streaming load: x is read once, so it should not push other data out of the caches.
  __device__ static Raw Load(const T* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
  __device__ static void Add(const Raw& raw, float (&acc)[kVec]) {
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if constexpr (sizeof(T) == 4) {
        acc[w] += __uint_as_float(words[w]);
      } else {
        float pair[2];
        UnpackPair(words[w], static_cast<T*>(nullptr), pair);
        acc[2 * w] += pair[0];
        acc[2 * w + 1] += pair[1];
      }
    }
  }
  __device__ static void Store(T* p, const float (&v)[kVec]) {
    uint4 raw;
    if constexpr (sizeof(T) == 4) {
      raw = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                       __float_as_uint(v[3]));
    } else {
      raw = make_uint4(PackPair<T>(v[0], v[1]), PackPair<T>(v[2], v[3]), PackPair<T>(v[4], v[5]),
                       PackPair<T>(v[6], v[7]));
    }
    *reinterpret_cast<uint4*>(p) = raw;
  }
};

template <typename T>
struct Io<T, 1> {
  using Raw = T;
  __device__ static Raw Zero() { return FromFloat<T>(0.0f); }
  __device__ static Raw Load(const T* p) { return __ldcs(p); }
  __device__ static void Add(const Raw& raw, float (&acc)[1]) { acc[0] += ToFloat(raw); }
  __device__ static void Store(T* p, const float (&v)[1]) { *p = FromFloat<T>(v[0]); }
};

// Float partial sums of one lane, through L2 only (other SMs read them in the same launch).
template <int kVec>
__device__ __forceinline__ void StorePartial(float* p, const float (&v)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      __stcg(reinterpret_cast<float4*>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) __stcg(p + i, v[i]);
  }
}

template <int kVec>
__device__ __forceinline__ void AddPartial(const float* p, float (&acc)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      const float4 f = __ldcg(reinterpret_cast<const float4*>(p + i));
      acc[i] += f.x;
      acc[i + 1] += f.y;
      acc[i + 2] += f.z;
      acc[i + 3] += f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] += __ldcg(p + i);
  }
}

template <PoolingForm kForm>
__device__ __forceinline__ int64_t SeqStart(const PoolingDeviceArgs& a, int64_t seq) {
  if constexpr (kForm == PoolingForm::kVarlen) {
    return a.cu_seqlens[seq];
  } else {
    return seq * a.seq_len;
  }
}

// The first sequence that owns a row at or after `row`: the one covering `row`, or an empty one
// starting at `row` (empty sequences belong to the chunk holding their start offset).
template <PoolingForm kForm>
__device__ int64_t FirstSequence(const PoolingDeviceArgs& a, int64_t row) {
  if constexpr (kForm != PoolingForm::kVarlen) {
    return a.seq_len > 0 ? row / a.seq_len : 0;
  } else {
    int64_t lo = 0;
    int64_t hi = a.num_sequences;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (a.cu_seqlens[mid + 1] > row || a.cu_seqlens[mid] >= row) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }
}

// Adds rows row, row + step, ... (< end) at column `col` into acc; in the masked form also
// counts the rows whose mask is set (into count; the same for every lane).
template <typename T, PoolingForm kForm, int kVec, int kStages>
__device__ __forceinline__ void SumRows(const PoolingDeviceArgs& a, int64_t row, int64_t end,
                                        int step, int64_t col, bool active, float (&acc)[kVec],
                                        int& count) {
  using Lane = Io<T, kVec>;
  const T* x = static_cast<const T*>(a.x) + col;
  const int64_t hidden = a.hidden;
  for (; row + (kStages - 1) * step < end; row += kStages * step) {
    bool counted[kStages];
    typename Lane::Raw raw[kStages];
#pragma unroll
    for (int u = 0; u < kStages; ++u) {
      counted[u] = kForm != PoolingForm::kMasked || __ldg(a.mask + row + u * step) != 0;
    }
#pragma unroll
    for (int u = 0; u < kStages; ++u) {
      raw[u] = active && counted[u] ? Lane::Load(x + (row + u * step) * hidden) : Lane::Zero();
    }
#pragma unroll
    for (int u = 0; u < kStages; ++u) {
      Lane::Add(raw[u], acc);
      count += counted[u] ? 1 : 0;
    }
  }
  for (; row < end; row += step) {
    const bool counted = kForm != PoolingForm::kMasked || __ldg(a.mask + row) != 0;
    const typename Lane::Raw raw = active && counted ? Lane::Load(x + row * hidden) : Lane::Zero();
    Lane::Add(raw, acc);
    count += counted ? 1 : 0;
  }
}

// Adds the groups' sums into group 0 with a fixed tree (deterministic). Afterwards group 0's
// acc holds the block's sums and every thread's count the block's count.
template <int kVec>
struct GroupReducer {
  float* sums;  // [kVec][groups][lanes] in shared memory
  int* counts;  // [groups] in shared memory
  int lane;
  int group;
  int groups;
  int lanes;

  __device__ void Reduce(float (&acc)[kVec], int& count) const {
    if (groups == 1) return;
    __syncthreads();  // earlier readers of the buffers are done
    Put(acc, count);
    __syncthreads();
    for (int half = groups / 2; half > 0; half /= 2) {
      if (group < half) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += sums[(v * groups + group + half) * lanes + lane];
        count += counts[group + half];
        Put(acc, count);
      }
      __syncthreads();
    }
    count = counts[0];
  }

  __device__ void Put(const float (&acc)[kVec], int count) const {
#pragma unroll
    for (int v = 0; v < kVec; ++v) sums[(v * groups + group) * lanes + lane] = acc[v];
    if (lane == 0) counts[group] = count;
  }
};

// out = sum / count, or zeros for an empty sequence.
template <typename T, int kVec>
__device__ __forceinline__ void WriteMean(T* out, const float (&sum)[kVec], int64_t count) {
  float mean[kVec];
  const float divisor = static_cast<float>(count);
#pragma unroll
  for (int v = 0; v < kVec; ++v) mean[v] = count > 0 ? sum[v] / divisor : 0.0f;
  Io<T, kVec>::Store(out, mean);
}

template <typename T, PoolingForm kForm, int kVec, int kStages>
__global__ void __launch_bounds__(kMaxBlockThreads) MeanPoolingKernel(const KernelParams p) {
  __shared__ float red_sums[kMaxBlockThreads * kVec];
  __shared__ int red_counts[kMaxBlockThreads];
  __shared__ bool finisher;
  const PoolingDeviceArgs& a = p.args;
  const int lane = static_cast<int>(threadIdx.x) & (p.lanes - 1);
  const int group = static_cast<int>(threadIdx.x) >> p.lane_shift;
  const int groups = static_cast<int>(blockDim.x) >> p.lane_shift;
  const int tile = static_cast<int>(blockIdx.y);
  const int64_t col = (static_cast<int64_t>(tile) * p.lanes + lane) * kVec;
  const bool active = col < a.hidden;
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * p.block_rows;
  const int64_t end = min(begin + p.block_rows, a.used_rows);
  const bool last_chunk = chunk + 1 == p.chunks;
  const GroupReducer<kVec> reducer{red_sums, red_counts, lane, group, groups, p.lanes};
  T* const out = static_cast<T*>(a.out) + col;

  for (int64_t seq = FirstSequence<kForm>(a, begin); seq < a.num_sequences; ++seq) {
    const int64_t first = SeqStart<kForm>(a, seq);
    const int64_t last = SeqStart<kForm>(a, seq + 1);
    // Empty sequences at `end` belong to the next chunk, or to this one if it is the last.
    if (first > end || (first == end && !last_chunk)) break;
    const int count_all = static_cast<int>(last - first);
    float acc[kVec] = {};
    if (first == last) {
      if (group == 0 && active) WriteMean<T, kVec>(out + seq * a.hidden, acc, 0);
      continue;
    }
    int count = 0;
    SumRows<T, kForm, kVec, kStages>(a, max(first, begin) + group, min(last, end), groups, col,
                                     active, acc, count);
    reducer.Reduce(acc, count);
    if (kForm != PoolingForm::kMasked) count = count_all;
    if (first >= begin && last <= end) {  // the whole sequence is in this chunk
      if (group == 0 && active) WriteMean<T, kVec>(out + seq * a.hidden, acc, count);
      continue;
    }
    const int64_t at = chunk * 2 + (first > begin ? 1 : 0);
    if (group == 0 && active) StorePartial<kVec>(p.partials + at * a.hidden + col, acc);
    if (kForm == PoolingForm::kMasked && threadIdx.x == 0) p.counts[at * p.tiles + tile] = count;
    __threadfence();
    __syncthreads();
    const int64_t c0 = first / p.block_rows;
    const int64_t c1 = (last - 1) / p.block_rows;
    if (threadIdx.x == 0) {
      unsigned* counter = p.counters + seq * p.tiles + tile;
      finisher = atomicAdd(counter, 1u) + 1 == static_cast<unsigned>(c1 - c0 + 1);
      if (finisher) *counter = 0u;  // ready for the next launch
    }
    __syncthreads();
    if (!finisher) continue;
    __threadfence();
    // Last piece in: add the partials in chunk order, groups taking every groups-th chunk.
    float sum[kVec] = {};
    int total = 0;
    for (int64_t c = c0 + group; c <= c1; c += groups) {
      const int64_t slot = c * 2 + (c == c0 && first > c0 * p.block_rows ? 1 : 0);
      if (active) AddPartial<kVec>(p.partials + slot * a.hidden + col, sum);
      if (kForm == PoolingForm::kMasked) total += __ldcg(p.counts + slot * p.tiles + tile);
    }
    reducer.Reduce(sum, total);
    if (kForm != PoolingForm::kMasked) total = count_all;
    if (group == 0 && active) WriteMean<T, kVec>(out + seq * a.hidden, sum, total);
  }
}

}  // namespace kernelserve::cuda::pooling

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_DEVICE_CUH_
