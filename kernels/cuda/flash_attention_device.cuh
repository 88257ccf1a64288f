// The flash attention forward kernel (device code), included by the per-head-dim .cu files.
//
// One block takes 16 * kWarps query rows of one head of one sequence; each warp owns 16 rows
// and keeps their Q fragments and output accumulators in registers. K and V tiles of kBlockK
// rows stream through kStages shared-memory stages filled by cp.async; S = Q K^T and O += P V
// run on the tensor cores (mma.sync m16n8k16, operands through ldmatrix), the softmax is online
// in fp32 in log2 units. Shared-memory rows are swizzled (16-byte chunk c of row r sits at
// c ^ (r % 8)) so that ldmatrix reads are free of bank conflicts. Key tiles no row of the
// block can see are never loaded; tiles that every row sees in full skip the per-element mask.
#ifndef KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_DEVICE_CUH_
#define KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/flash_attention_launch.h"

namespace kernelserve::cuda::flash {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float TanhApprox(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t SharedAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LoadMatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LoadMatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b for one m16n8k16 tile with fp32 accumulators.
template <bool kBf16>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a pair of 16-bit values (lo in the low half).
template <bool kBf16>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Element offset of (row, col) in a swizzled tile of kD columns. REQUIRES: col % 8 == 0.
template <int kD>
__device__ __forceinline__ int Swizzle(int row, int col) {
  return row * kD + ((((col >> 3) ^ (row & 7))) << 3);
}

// Starts copying `rows` rows of kD values (row r from src + r * stride) into a swizzled tile;
// rows at or past `valid` are zero-filled.
template <typename T, int kD, int kThreads>
__device__ __forceinline__ void LoadTile(T* tile, const T* src, int64_t stride, int rows,
                                         int64_t valid) {
  constexpr int kChunks = kD / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int c = (i % kChunks) * 8;
    const bool ok = r < valid;
    const T* from = ok ? src + r * stride + c : src;
    CopyAsync16(SharedAddress(tile + Swizzle<kD>(r, c)), from, ok);
  }
}

// Where one sequence lives.
struct Span {
  int64_t q_begin;
  int64_t q_len;
  int64_t k_begin;
  int64_t k_len;
};

__device__ __forceinline__ Span SpanOf(const FlashDeviceArgs& p, int64_t seq) {
  if (p.cu_seqlens_q != nullptr) {
    const int64_t q0 = p.cu_seqlens_q[seq];
    const int64_t k0 = p.cu_seqlens_k[seq];
    return {q0, p.cu_seqlens_q[seq + 1] - q0, k0, p.cu_seqlens_k[seq + 1] - k0};
  }
  return {seq * p.seq_len_q, p.seq_len_q, seq * p.seq_len_k, p.seq_len_k};
}

constexpr int64_t kNoLimit = int64_t{1} << 62;

// The visible key range [lo, hi] of query row `row` (relative to its sequence).
__device__ __forceinline__ void VisibleRange(const FlashDeviceArgs& p, const Span& s, int64_t row,
                                             int64_t& lo, int64_t& hi) {
  const int64_t diagonal = row + s.k_len - s.q_len;
  lo = p.window_left >= 0 ? diagonal - p.window_left : 0;
  hi = s.k_len - 1;
  if (p.causal) hi = min(hi, diagonal);
  if (p.window_right >= 0) hi = min(hi, diagonal + p.window_right);
}

template <typename T, int kD, int kBlockQ, int kBlockK, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32) FlashForwardKernel(const FlashDeviceArgs p) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kSTiles = kBlockK / 8;  // n8 tiles of S
  constexpr int kOTiles = kD / 8;       // n8 tiles of O
  constexpr int kDSteps = kD / 16;      // k16 steps of Q K^T
  static_assert(kBlockQ == 16 * kWarps, "each warp owns 16 query rows");
  static_assert(kBlockK % 16 == 0 && kD % 16 == 0, "tiles are multiples of 16");
  static_assert(kStages >= 2, "at least two stages");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const sq = reinterpret_cast<T*>(smem);
  T* const sk = sq + kBlockQ * kD;
  T* const sv = sk + kStages * kBlockK * kD;

  const int64_t seq = blockIdx.z;
  const int64_t head = blockIdx.y;
  const int64_t q_start = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kBlockQ;
  const Span span = SpanOf(p, seq);
  if (q_start >= span.q_len) return;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t kv_head = head / (p.num_heads_q / p.num_heads_kv);
  const int64_t q_stride = p.num_heads_q * kD;
  const int64_t kv_stride = p.num_heads_kv * kD;
  const T* const q_ptr = static_cast<const T*>(p.q) + span.q_begin * q_stride + head * kD;
  const T* const k_ptr = static_cast<const T*>(p.k) + span.k_begin * kv_stride + kv_head * kD;
  const T* const v_ptr = static_cast<const T*>(p.v) + span.k_begin * kv_stride + kv_head * kD;

  // Keys some row of the block sees: from the first row's lo to the last row's hi.
  const int64_t last_row = min(q_start + kBlockQ, span.q_len) - 1;
  int64_t first_lo, first_hi, last_lo, last_hi;
  VisibleRange(p, span, q_start, first_lo, first_hi);
  VisibleRange(p, span, last_row, last_lo, last_hi);
  const int64_t j_lo = max(first_lo, int64_t{0});
  const int64_t j_hi = last_hi;
  const int64_t tile_begin = j_lo / kBlockK;
  const int num_tiles = j_hi >= j_lo ? static_cast<int>(j_hi / kBlockK - tile_begin + 1) : 0;
  const bool has_segments = p.q_segment_ids != nullptr;

  // This thread's two rows (g and g + 8 of the warp's 16) and their visible ranges.
  const int g = lane / 4;
  const int t = lane % 4;
  int64_t row[2], lo[2], hi[2], q_seg[2];
  const float* bias_row[2];
  for (int r = 0; r < 2; ++r) {
    row[r] = q_start + warp * 16 + g + r * 8;
    const int64_t safe_row = min(row[r], span.q_len - 1);
    VisibleRange(p, span, safe_row, lo[r], hi[r]);
    q_seg[r] = has_segments ? p.q_segment_ids[seq * p.seq_len_q + safe_row] : 0;
    bias_row[r] = p.bias == nullptr ? nullptr
                                    : p.bias + seq * p.bias_batch_stride +
                                          head * p.bias_head_stride + safe_row * span.k_len;
  }

  LoadTile<T, kD, kThreads>(sq, q_ptr + q_start * q_stride, q_stride, kBlockQ,
                            span.q_len - q_start);
  auto load_kv = [&](int tile, int stage) {
    const int64_t j0 = (tile_begin + tile) * kBlockK;
    const int64_t valid = span.k_len - j0;
    LoadTile<T, kD, kThreads>(sk + stage * kBlockK * kD, k_ptr + j0 * kv_stride, kv_stride, kBlockK,
                              valid);
    LoadTile<T, kD, kThreads>(sv + stage * kBlockK * kD, v_ptr + j0 * kv_stride, kv_stride, kBlockK,
                              valid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_kv(s, s);
    CommitCopies();
  }

  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool softcap = p.softcap > 0.0f;
  const float cap_in = softcap ? p.softmax_scale / p.softcap : 0.0f;
  const float cap_out = p.softcap * kLog2e;

  uint32_t qf[kDSteps][4];
  float o[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int it = 0; it < num_tiles; ++it) {
    WaitCopies<kStages - 2>();
    __syncthreads();
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = ks * 16 + (lane >> 4) * 8;
        LoadMatrix4(qf[ks], SharedAddress(sq + Swizzle<kD>(r, c)));
      }
    }
    if (it + kStages - 1 < num_tiles) load_kv(it + kStages - 1, (it + kStages - 1) % kStages);
    CommitCopies();

    const int stage = it % kStages;
    const T* const tk = sk + stage * kBlockK * kD;
    const T* const tv = sv + stage * kBlockK * kD;
    const int64_t j0 = (tile_begin + it) * kBlockK;

    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDSteps; ++ks) {
#pragma unroll
      for (int nb = 0; nb < kSTiles / 2; ++nb) {
        uint32_t b[4];
        const int r = nb * 16 + (lane & 7) + (lane >> 4) * 8;
        const int c = ks * 16 + ((lane >> 3) & 1) * 8;
        LoadMatrix4(b, SharedAddress(tk + Swizzle<kD>(r, c)));
        Mma<kBf16>(s[2 * nb], qf[ks], b[0], b[1]);
        Mma<kBf16>(s[2 * nb + 1], qf[ks], b[2], b[3]);
      }
    }

    // Logits in log2 units; hidden keys -inf.
    const bool full = !has_segments && j0 + kBlockK - 1 <= first_hi && j0 >= last_lo;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int64_t j = j0 + n * 8 + 2 * t + (e & 1);
        float x = softcap ? cap_out * TanhApprox(s[n][e] * cap_in) : s[n][e] * scale_log2;
        bool visible = true;
        if (!full) {
          visible = j >= lo[r] && j <= hi[r];
          if (has_segments && visible) {
            visible = q_seg[r] > 0 && p.kv_segment_ids[seq * p.seq_len_k + j] == q_seg[r];
          }
        }
        if (bias_row[0] != nullptr && visible) x += bias_row[r][j] * kLog2e;
        s[n][e] = visible ? x : -INFINITY;
      }
    }

    // Online softmax: new row maxima, rescale, probabilities.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n)
        tile_max = fmaxf(tile_max, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_new = fmaxf(m[r], tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = Exp2(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[n][2 * r] = Exp2(s[n][2 * r] - m_use);
        s[n][2 * r + 1] = Exp2(s[n][2 * r + 1] - m_use);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int d = 0; d < kOTiles; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint32_t a[4] = {Pack<kBf16>(s[2 * kk][0], s[2 * kk][1]),
                             Pack<kBf16>(s[2 * kk][2], s[2 * kk][3]),
                             Pack<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Pack<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int db = 0; db < kD / 16; ++db) {
        uint32_t b[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = db * 16 + (lane >> 4) * 8;
        LoadMatrix4Trans(b, SharedAddress(tv + Swizzle<kD>(r, c)));
        Mma<kBf16>(o[2 * db], a, b[0], b[1]);
        Mma<kBf16>(o[2 * db + 1], a, b[2], b[3]);
      }
    }
  }
  WaitCopies<0>();

  // Normalise and store; rows that saw no key give zeros and lse -inf.
  T* const out_ptr = static_cast<T*>(p.out) + span.q_begin * q_stride + head * kD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (row[r] >= span.q_len) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* const dst = out_ptr + row[r] * q_stride + 2 * t;
#pragma unroll
    for (int d = 0; d < kOTiles; ++d) {
      *reinterpret_cast<uint32_t*>(dst + d * 8) =
          Pack<kBf16>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && t == 0) {
      const float lse = sum > 0.0f ? (m[r] + __log2f(sum)) * kLn2 : -INFINITY;
      const int64_t index = p.cu_seqlens_q != nullptr
                                ? head * p.total_q + span.q_begin + row[r]
                                : (seq * p.num_heads_q + head) * p.seq_len_q + row[r];
      p.lse[index] = lse;
    }
  }
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttention(const FlashDeviceArgs& args, cudaStream_t stream) {
  if (args.num_heads_q < 1 || args.num_heads_kv < 1 || args.num_heads_q % args.num_heads_kv != 0 ||
      args.num_sequences < 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t longest = args.cu_seqlens_q != nullptr ? args.max_seq_len_q : args.seq_len_q;
  const int64_t q_tiles = (longest + kBlockQ - 1) / kBlockQ;
  if (q_tiles == 0 || args.num_sequences == 0) return cudaSuccess;
  if (q_tiles > 2147483647 || args.num_heads_q > 65535 || args.num_sequences > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  constexpr size_t kShared = FlashSharedBytes(kHeadDim, kBlockQ, kBlockK, kStages);
  auto* kernel = &flash::FlashForwardKernel<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages>;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  if (error != cudaSuccess) return error;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(args.num_heads_q),
                  static_cast<unsigned>(args.num_sequences));
  kernel<<<grid, kWarps * 32, kShared, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_CUDA_FLASH_ATTENTION_DEVICE_CUH_
