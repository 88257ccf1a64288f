// Device code of the CUDA paged attention launchers: the split-KV attention kernel, the combine
// kernel and LaunchPagedAttention's template body (instantiated per head dim by the
// paged_attention_hdim*.cu files, so that CI compiles them in parallel).
//
// Design (issue 36). Decode reads every cached key and value once and does 4 * M * D flops per
// token (M = query rows of a kv head), so with M <= 16 it is bound by memory: the kernel's job
// is to keep enough bytes in flight on every SM.
// - A block takes one (split, kv head, 16-row group, sequence). Its rows are the G = Hq / Hkv
//   query heads sharing the kv head times the Sq new tokens (GQA packing), so each page is read
//   once for all of them; the 16 rows are one m16 tile of mma.sync m16n8k16 (bf16/f16 in, fp32
//   accumulate). Shapes with more rows take more row groups, which re-read the pages (mostly
//   from L2, as the groups of one page run side by side).
// - The block streams its split's tokens in tiles of kWarps * 16 tokens: each thread copies
//   16-byte vectors (cp.async, kStages tiles in flight) from the page of each token row, so a
//   tile may span part of a page or several pages, in any order. Rows past the end are
//   zero-filled (and masked), so no stale value can reach P*V as NaN.
// - Each warp takes its own 16 tokens of every tile against all 16 rows and keeps its own
//   online softmax (fp32, base 2); the warps are merged once at the end through shared memory.
// - splits == 1 writes out and lse directly; otherwise each split writes its normalised partial
//   output (fp32) and natural-log lse to the workspace and PagedCombineKernel merges them.
// - fp8 caches (e4m3/e5m2): the ring holds the tiles as they lie in the pages (half the bytes),
//   and each warp converts the fp8 values it loads from the ring to f16 in registers (exact:
//   every fp8 value is an f16 value) and runs both products in f16 (ComputeTileFp8). The per-head
//   scales fold into the logit scale (k) and the output's normalisation (v).
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DEVICE_CUH_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/paged_attention/cuda/paged_attention_launch.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"

// Returns a failed CUDA call's error from the enclosing launcher.
#define KS_PAGED_RETURN_IF_ERROR(expr)                          \
  do {                                                          \
    const cudaError_t ks_paged_error_ = (expr);                 \
    if (ks_paged_error_ != cudaSuccess) return ks_paged_error_; \
  } while (0)

namespace kernelserve::cuda {
namespace paged {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kRows = kPagedRowsPerBlock;
constexpr int kWarpTokens = kPagedTokensPerWarp;
constexpr int kCombineThreads = 128;
// Partial outputs a combine thread loads before its weights are known (32 registers; a batch of
// one at 32 splits takes 8 a thread at D 128).
constexpr int kCombinePreload = 8;
constexpr size_t kWorkspaceAlign = 256;

inline size_t AlignUp(size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// The caches' element type: T itself, or an fp8 type converted to T in shared memory.
template <typename TC>
struct CacheKind {
  static constexpr bool kFp8 = false;
};
template <>
struct CacheKind<__nv_fp8_e4m3> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E4M3;
};
template <>
struct CacheKind<__nv_fp8_e5m2> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E5M2;
};

// Shared-memory layout of one instance (kCacheBytes: bytes per cache element, 2 or 1). Rows are
// padded by 16 bytes (8 elements of T, 16 of fp8) so that the 8 row addresses of an ldmatrix
// fall in distinct banks.
template <int kHeadDim, int kWarps, int kCacheBytes = 2>
struct Tiling {
  static constexpr bool kFp8 = kCacheBytes == 1;
  static constexpr int kHeadDimValue = kHeadDim;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTileN = kWarps * kWarpTokens;
  static constexpr int kStride = kHeadDim + 8;  // elements of T per smem row
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte vectors per row of T
  // 16-byte vectors per cache row, and bytes per ring row.
  static constexpr int kCacheChunks = kHeadDim * kCacheBytes / 16;
  static constexpr int kRingStride = kHeadDim * kCacheBytes + 16;
  // Two tiles per block (one in flight while the other is computed): a small ring lets more
  // blocks share an SM (PagedBlocksPerSm), which is what keeps enough copies in flight. D 256
  // with 16-bit caches runs one block per SM whatever its ring, so it takes three (two tiles
  // in flight).
  static constexpr int kStages = kHeadDim >= 256 && !kFp8 ? 3 : 2;
  // The tile rows each thread copies: threadIdx.x / kCacheChunks + j * kRowStep.
  static constexpr int kRowStep = kThreads / kCacheChunks;
  static constexpr int kRowsPerThread = kTileN / kRowStep;
  // Whether the page-table entries of the next tile's rows are loaded one iteration ahead (a
  // register per row), so that issuing its copies waits on no table read; not at D 256 bf16
  // (16 rows a thread), whose registers are spent.
  static constexpr bool kPrefetchPages = kRowsPerThread <= 8;
  static constexpr size_t kQBytes = size_t{kRows} * kStride * 2;
  static constexpr size_t kRingTileBytes = size_t{kTileN} * kRingStride;  // K (then V), a stage
  static constexpr size_t kRingBytes = size_t{kStages} * 2 * kRingTileBytes;
  // The ring, then (fp8) one float per warp for the block's largest |q| (QToHalfForFp8).
  static constexpr size_t kPipeBytes = kRingBytes + (kFp8 ? size_t{kWarps} * 4 : 0);
  // The end-of-block merge: each warp's output rows (fp32), then each warp's row max and sum,
  // then each row's merged max and sum.
  static constexpr size_t kMergeOBytes = size_t{kWarps} * kRows * kHeadDim * 4;
  static constexpr size_t kMergeBytes =
      kMergeOBytes + 2 * size_t{kWarps} * kRows * 4 + 2 * kRows * 4;
  static constexpr size_t kSmemBytes =
      kQBytes + (kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes);
  static_assert(kThreads % kChunks == 0 && kThreads % kCacheChunks == 0,
                "a thread copies one fixed column of every row");
  static_assert(kHeadDim % 16 == 0, "head dim is a whole number of k16 steps");
  // The heuristic counts on this many blocks per SM (228 KiB, 1 KiB of it reserved per block).
  static_assert(PagedBlocksPerSm(kHeadDim, kFp8) * (kSmemBytes + 1024) <= 228 * 1024,
                "the shared memory of a block outgrew PagedBlocksPerSm");
};

struct AttentionParams {
  PagedDeviceArgs args;
  int num_splits = 1;
  int row_groups = 1;  // ceil(rows / 16)
  int rows = 0;        // G * Sq
  int group = 1;       // G = Hq / Hkv
  // log2(page_size) when it is a power of two (a token's page and slot by shift and mask, not
  // by two integer divisions per row of every tile: the kernel is bound by issued
  // instructions), else -1.
  int page_shift = -1;
  int window_left = -1;
  int window_right = -1;
  float scale_log2 = 0.0f;       // softmax_scale * log2(e), used without a soft cap
  float* partial_out = nullptr;  // [splits, B, Hq, Sq, D] when splits > 1
  float* partial_lse = nullptr;  // [splits, B, Hq, Sq]
};

// ---- PTX wrappers ----

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared; `bytes` 0 zero-fills the destination without reading.
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

template <typename T>
struct Mma;
template <>
struct Mma<__half> {
  __device__ __forceinline__ static void Run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t Pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void Run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Programmatic dependent launch (sm_90 on): a kernel launched with it (LaunchOnStream; the
// combine pass) may start while the kernel before it on the stream is finishing. It waits in
// WaitForPriorGrid, before its first read of global memory, until that kernel has ended and its
// writes are visible; AllowNextGrid lets it start once every block of that kernel has called it
// or ended. Both are no-ops in launches that do not ask for it, and compiled out below sm_90
// (where such a kernel must not ask: WaitsForPriorGrid).
__device__ __forceinline__ void WaitForPriorGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowNextGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

// ---- the attention kernel ----

// The logit scale of one block: softmax_scale times its kv head's k_scale (1 but for fp8
// caches), also as base 2 (without a soft cap).
struct BlockScale {
  float scale;       // multiplies q.k
  float scale_log2;  // scale * log2(e)
};

// One query row of the block as a thread sees it.
struct RowInfo {
  bool valid;  // a real row (the last group may be partial)
  int pos;     // its position in the sequence: L - Sq + i
};

__device__ __forceinline__ RowInfo RowOf(const AttentionParams& p, int row_group, int r, int len) {
  const int m = row_group * kRows + r;
  const int sq = static_cast<int>(p.args.seq_len_q);
  return {m < p.rows, len - sq + m % sq};
}

// Whether the row at `pos` sees token `t` (t < len checked here: tiles run past the end).
__device__ __forceinline__ bool Sees(const AttentionParams& p, const RowInfo& row, int t, int len) {
  if (!row.valid || t >= len) return false;
  if (p.args.causal && t > row.pos) return false;
  if (p.window_left >= 0 && t < row.pos - p.window_left) return false;
  if (p.window_right >= 0 && t > row.pos + p.window_right) return false;
  return true;
}

// The page of each row this thread copies in the tile of tokens first .. first + kTileN - 1
// (0 past the end, where nothing is read). kPow2: the page size is 1 << p.page_shift.
template <typename Tl, bool kPow2>
__device__ __forceinline__ void LoadPagesOf(const AttentionParams& p, int b, int first, int len,
                                            int32_t (&pages)[Tl::kRowsPerThread]) {
  const int32_t* table = p.args.block_table + b * p.args.max_pages;
  const auto page_size = static_cast<uint32_t>(p.args.page_size);
#pragma unroll
  for (int j = 0; j < Tl::kRowsPerThread; ++j) {
    const auto t = static_cast<uint32_t>(first + threadIdx.x / Tl::kCacheChunks + j * Tl::kRowStep);
    const uint32_t page = kPow2 ? t >> p.page_shift : t / page_size;
    pages[j] = static_cast<int>(t) < len ? __ldg(table + page) : 0;
  }
}

// Issues the copies of one tile of K and V (tokens first .. first + kTileN - 1) into the ring
// stage `dst` (K then V), as the pages hold them (TC), from the pages LoadPages found. Each
// thread copies a fixed 16-byte column of every kRowStep-th row. Slots are numbered in 32 bits
// (ValidArgs) and rows past the end copy nothing from slot 0's address (zero-filled), so that a
// row costs a few instructions and no branch: issuing the copies is a large part of a tile's
// instructions.
template <typename TC, typename Tl, bool kPow2>
__device__ __forceinline__ void LoadTileOf(const AttentionParams& p, int kv_head, int first,
                                           int len, const int32_t (&pages)[Tl::kRowsPerThread],
                                           unsigned char* dst) {
  constexpr uint32_t kHeadBytes = uint32_t{Tl::kHeadDimValue} * sizeof(TC);
  const int col = threadIdx.x % Tl::kCacheChunks;
  // This thread's column of the kv head in a token slot, and the bytes between slots.
  const int64_t column = int64_t{kv_head} * kHeadBytes + col * 16;
  const auto* k = static_cast<const unsigned char*>(p.args.k_cache) + column;
  const auto* v = static_cast<const unsigned char*>(p.args.v_cache) + column;
  const auto slot_bytes = static_cast<uint32_t>(p.args.num_heads_kv) * kHeadBytes;
  const auto page_size = static_cast<uint32_t>(p.args.page_size);
#pragma unroll
  for (int j = 0; j < Tl::kRowsPerThread; ++j) {
    const int row = threadIdx.x / Tl::kCacheChunks + j * Tl::kRowStep;
    const auto t = static_cast<uint32_t>(first + row);
    const uint32_t in_page = kPow2 ? t & (page_size - 1) : t % page_size;
    const uint32_t slot = static_cast<uint32_t>(pages[j]) * page_size + in_page;
    const uint64_t offset = static_cast<uint64_t>(slot) * slot_bytes;
    const int bytes = static_cast<int>(t) < len ? 16 : 0;
    unsigned char* k_dst = dst + row * Tl::kRingStride + col * 16;
    CopyAsync16(k_dst, k + offset, bytes);
    CopyAsync16(k_dst + Tl::kRingTileBytes, v + offset, bytes);
  }
}

// LoadPagesOf and LoadTileOf with the page arithmetic of the call's page size (a uniform branch
// per tile, not one per row).
template <typename Tl>
__device__ __forceinline__ void LoadPages(const AttentionParams& p, int b, int first, int len,
                                          int32_t (&pages)[Tl::kRowsPerThread]) {
  if (p.page_shift >= 0) {
    LoadPagesOf<Tl, true>(p, b, first, len, pages);
  } else {
    LoadPagesOf<Tl, false>(p, b, first, len, pages);
  }
}
template <typename TC, typename Tl>
__device__ __forceinline__ void LoadTile(const AttentionParams& p, int kv_head, int first, int len,
                                         const int32_t (&pages)[Tl::kRowsPerThread],
                                         unsigned char* dst) {
  if (p.page_shift >= 0) {
    LoadTileOf<TC, Tl, true>(p, kv_head, first, len, pages, dst);
  } else {
    LoadTileOf<TC, Tl, false>(p, kv_head, first, len, pages, dst);
  }
}

// Four fp8 values (the low byte first) as two pairs of f16: bytes 0, 1 in `lo`, bytes 2, 3 in
// `hi` (exact: every fp8 value is an f16 value). On sm_89 on in PTX, so that the high pair is
// converted from the register's upper half rather than shifted down first; below, by the
// library's conversion (emulated there).
template <typename TC>
__device__ __forceinline__ void Fp8x4ToHalf2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (CacheKind<TC>::kInterpretation == __NV_E4M3) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
        " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(four));
  } else {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e5m2x2 %0, l;\n"
        " cvt.rn.f16x2.e5m2x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(four));
  }
#else
  const __half2 l(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four & 0xFFFFu),
                                             CacheKind<TC>::kInterpretation));
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four >> 16),
                                             CacheKind<TC>::kInterpretation));
  lo = *reinterpret_cast<const uint32_t*>(&l);
  hi = *reinterpret_cast<const uint32_t*>(&h);
#endif
}

// The fp8 path's order of the head dims within each k16 step of Q K^T. An ldmatrix of an fp8 K
// tile (its bytes read as 16-bit pairs) gives a thread the 4 bytes 4l .. 4l + 3 (l = lane % 4)
// of a token's 16-byte slice, which convert to the B fragment of k indices 2l, 2l + 1 (the low
// pair) and 2l + 8, 2l + 9 (the high pair): k index 2l + j stands for head dim 4l + j and
// 2l + 8 + j for 4l + 2 + j. The query rows are stored in that order (QToHalfForFp8): word l of
// each 16-element group is the input's word 2l, word 4 + l its word 2l + 1.

// Rewrites the block's query rows in place for the fp8 path: as f16 in the head-dim order above,
// bf16 rows times 2^-e, e >= 0 the least that keeps the largest |q| within f16's range (e = 0
// unless some |q| > 65504). Returns `scale` times 2^e, so that f16 logits times it are the
// logits. bf16 to f16 is exact for every value f16 holds as a normal number; values under
// 2^-14 keep f16's subnormal precision (an error under 2^-25 of the element, far below bf16's
// own rounding of the products' sum). `scratch` holds kWarps floats.
// REQUIRES: the rows landed and are visible to all; a barrier before they are read again.
template <typename T, int kHeadDim, int kWarps>
__device__ __forceinline__ BlockScale QToHalfForFp8(void* q_s, float* scratch, BlockScale scale) {
  using Tl = Tiling<kHeadDim, kWarps>;
  constexpr int kGroups = kHeadDim / 16;  // 16-element groups of a row
  auto* q = static_cast<T*>(q_s);
  int e = 0;
  if constexpr (!std::is_same_v<T, __half>) {
    float largest = 0.0f;
    for (int c = threadIdx.x; c < kRows * Tl::kChunks; c += Tl::kThreads) {
      const T* x = q + (c / Tl::kChunks) * Tl::kStride + (c % Tl::kChunks) * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) largest = fmaxf(largest, fabsf(static_cast<float>(x[j])));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    }
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = largest;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) largest = fmaxf(largest, scratch[w]);
    if (largest > 65504.0f && largest <= FLT_MAX) frexpf(largest / 65504.0f, &e);
  }
  const float down = ldexpf(1.0f, -e);
  for (int c = threadIdx.x; c < kRows * kGroups; c += Tl::kThreads) {
    auto* x = reinterpret_cast<uint4*>(q + (c / kGroups) * Tl::kStride + (c % kGroups) * 16);
    alignas(16) T in[16];
    reinterpret_cast<uint4*>(in)[0] = x[0];
    reinterpret_cast<uint4*>(in)[1] = x[1];
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      w[j] = Mma<__half>::Pack(static_cast<float>(in[2 * j]) * down,
                               static_cast<float>(in[2 * j + 1]) * down);
    }
    x[0] = make_uint4(w[0], w[2], w[4], w[6]);
    x[1] = make_uint4(w[1], w[3], w[5], w[7]);
  }
  const float up = ldexpf(1.0f, e);
  return {scale.scale * up, scale.scale_log2 * up};
}

// The block's 16 query rows into shared memory (zeros for rows past the end).
template <typename T, int kHeadDim, int kWarps>
__device__ __forceinline__ void LoadQ(const AttentionParams& p, int b, int kv_head, int row_group,
                                      T* q_s) {
  using Tl = Tiling<kHeadDim, kWarps>;
  const T* q = static_cast<const T*>(p.args.q);
  const int sq = static_cast<int>(p.args.seq_len_q);
  for (int c = threadIdx.x; c < kRows * Tl::kChunks; c += Tl::kThreads) {
    const int r = c / Tl::kChunks;
    const int col = c % Tl::kChunks;
    const int m = row_group * kRows + r;
    int64_t offset = 0;
    int bytes = 0;
    if (m < p.rows) {
      const int64_t hq = static_cast<int64_t>(kv_head) * p.group + m / sq;
      offset =
          ((static_cast<int64_t>(b) * sq + m % sq) * p.args.num_heads_q + hq) * kHeadDim + col * 8;
      bytes = 16;
    }
    CopyAsync16(q_s + r * Tl::kStride + col * 8, q + offset, bytes);
  }
}

// Per-thread state of a warp's online softmax: rows lane/4 and lane/4 + 8 (h = 0, 1), the
// thread's columns of the output (D/8 n8 tiles of 4 floats).
template <int kHeadDim>
struct WarpState {
  float o[kHeadDim / 8][4];
  float row_max[2];  // base-2 logits
  float row_sum[2];  // this thread's columns only; summed over the quad at the end
};

// Scale, soft cap, mask and the online softmax of a warp's logits `s` (Q K^T's accumulators over
// its 16 tokens of the tile from `first`: token (lane % 4) * 2 + e + 8 * nt of them), which
// become P. `masked` false: every real row sees every token of the tile (TileNeedsMask), so the
// per-element mask is skipped; padding rows past p.rows then hold finite values never stored.
// `upper` false: rows 8-15 of the block are all padding (a decode step of up to 8 query heads a
// kv head fills half the m16 tile or less), so their half of the work is skipped and their P is
// zero (O's rows 8-15 stay zero, their max -inf).
template <int kHeadDim>
__device__ __forceinline__ void SoftmaxTile(const AttentionParams& p, const BlockScale& scale,
                                            const RowInfo (&rows)[2], bool upper, int first,
                                            int len, bool masked, float (&s)[2][4],
                                            WarpState<kHeadDim>& st) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int t0 = first + warp * kWarpTokens + (lane % 4) * 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h == 1 && !upper) {
      s[0][2] = s[0][3] = s[1][2] = s[1][3] = 0.0f;
      break;
    }
    // Scale, soft cap, mask; in base 2 so that exp2 does the softmax.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        float x = s[nt][e];
        if (p.args.softcap > 0.0f) {
          x = p.args.softcap * tanhf(x * scale.scale / p.args.softcap) * kLog2e;
        } else {
          x *= scale.scale_log2;
        }
        s[nt][e] = masked && !Sees(p, rows[h], t0 + nt * 8 + (e % 2), len) ? -INFINITY : x;
      }
    }
    // Online softmax of row h.
    float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float new_max = fmaxf(st.row_max[h], mx);
    // A row that has seen nothing yet keeps max -inf; subtracting 0 then keeps exp2 at 0.
    const float base = new_max == -INFINITY ? 0.0f : new_max;
    const float alpha = exp2f(st.row_max[h] - base);
    st.row_max[h] = new_max;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = exp2f(s[nt][2 * h + e] - base);
        s[nt][2 * h + e] = pe;
        sum += pe;
      }
    }
    st.row_sum[h] = st.row_sum[h] * alpha + sum;
    // Once a row's max settles, alpha is 1 on most tiles: skip the D/4 multiplies then (the
    // whole warp agrees, so the branch does not diverge).
    if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt) {
        st.o[dt][2 * h] *= alpha;
        st.o[dt][2 * h + 1] *= alpha;
      }
    }
  }
}

// P (SoftmaxTile's result) as the A operand of P V: k = the warp's 16 tokens.
template <typename T>
__device__ __forceinline__ void PackP(const float (&s)[2][4], uint32_t (&a)[4]) {
  a[0] = Mma<T>::Pack(s[0][0], s[0][1]);
  a[1] = Mma<T>::Pack(s[0][2], s[0][3]);
  a[2] = Mma<T>::Pack(s[1][0], s[1][1]);
  a[3] = Mma<T>::Pack(s[1][2], s[1][3]);
}

// One tile of a 16-bit cache: K at k_s, V kTileN rows after it (the ring stage).
template <typename T, int kHeadDim, int kWarps>
__device__ __forceinline__ void ComputeTile(const AttentionParams& p, const BlockScale& scale,
                                            const RowInfo (&rows)[2], bool upper, int first,
                                            int len, bool masked, const T* q_s, const T* k_s,
                                            WarpState<kHeadDim>& st) {
  using Tl = Tiling<kHeadDim, kWarps>;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const T* v_s = k_s + Tl::kTileN * Tl::kStride;
  k_s += warp * kWarpTokens * Tl::kStride;
  v_s += warp * kWarpTokens * Tl::kStride;

  // S = Q K^T for the warp's 16 tokens: two n8 tiles.
  float s[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    uint32_t a[4];
    LdMatrixX4(a, q_s + (lane % 16) * Tl::kStride + kk * 16 + (lane / 16) * 8);
    uint32_t bk[4];
    LdMatrixX4(bk,
               k_s + ((lane % 8) + (lane / 16) * 8) * Tl::kStride + kk * 16 + ((lane / 8) % 2) * 8);
    Mma<T>::Run(s[0], a, bk[0], bk[1]);
    Mma<T>::Run(s[1], a, bk[2], bk[3]);
  }
  SoftmaxTile(p, scale, rows, upper, first, len, masked, s, st);

  // O += P V.
  uint32_t a[4];
  PackP<T>(s, a);
#pragma unroll
  for (int dn = 0; dn < kHeadDim / 16; ++dn) {
    uint32_t bv[4];
    LdMatrixX4Trans(
        bv, v_s + ((lane % 8) + ((lane / 8) % 2) * 8) * Tl::kStride + dn * 16 + (lane / 16) * 8);
    Mma<T>::Run(st.o[2 * dn], a, bv[0], bv[1]);
    Mma<T>::Run(st.o[2 * dn + 1], a, bv[2], bv[3]);
  }
}

// One tile of an fp8 cache, in f16 on the tensor cores: the fp8 K and V of the ring stage at
// `stage` are loaded by ldmatrix as pairs of bytes and converted in registers; q_s holds the
// rows QToHalfForFp8 wrote. Each x4 ldmatrix takes 32 bytes of the warp's 16 tokens: matrices
// 0-3 are tokens 0-7 and 8-15 at bytes 0-15, then tokens 0-7 and 8-15 at bytes 16-31.
// O's head dims come out in the order FragmentColumn<true> gives.
template <typename TC, int kHeadDim, int kWarps>
__device__ __forceinline__ void ComputeTileFp8(const AttentionParams& p, const BlockScale& scale,
                                               const RowInfo (&rows)[2], bool upper, int first,
                                               int len, bool masked, const __half* q_s,
                                               const unsigned char* stage,
                                               WarpState<kHeadDim>& st) {
  using Tl = Tiling<kHeadDim, kWarps, 1>;
  const int lane = threadIdx.x % 32;
  const int token = threadIdx.x / 32 * kWarpTokens + lane % 8 + ((lane / 8) % 2) * 8;
  const unsigned char* k_s = stage + token * Tl::kRingStride + (lane / 16) * 16;
  const unsigned char* v_s = k_s + Tl::kRingTileBytes;

  // S = Q K^T: a register of K holds bytes 4l .. 4l + 3 of the thread's token (lane / 4) in
  // its slice, the B fragment of one n8 tile in one k16 step.
  float s[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 32; ++kk) {
    uint32_t bk[4];
    LdMatrixX4(bk, k_s + kk * 32);
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      uint32_t a[4];
      LdMatrixX4(a, q_s + (lane % 16) * Tl::kStride + (2 * kk + step) * 16 + (lane / 16) * 8);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        uint32_t b0, b1;
        Fp8x4ToHalf2x2<TC>(bk[2 * step + nt], b0, b1);
        Mma<__half>::Run(s[nt], a, b0, b1);
      }
    }
  }
  SoftmaxTile(p, scale, rows, upper, first, len, masked, s, st);

  // O += P V: transposed, a register of V holds bytes 2c, 2c + 1 (c = lane / 4) of tokens 2l
  // (low half) and 2l + 1 (high half); regrouped by byte, the low half is (2l, 2l + 1) of byte
  // 2c and the high half of byte 2c + 1: the B fragments of two n8 tiles, head dims 2c and
  // 2c + 1 of the slice.
  uint32_t a[4];
  PackP<__half>(s, a);
#pragma unroll
  for (int dn = 0; dn < kHeadDim / 32; ++dn) {
    uint32_t bv[4];
    LdMatrixX4Trans(bv, v_s + dn * 32);
#pragma unroll
    for (int slice = 0; slice < 2; ++slice) {
      uint32_t even[2], odd[2];  // [tokens 0-7, tokens 8-15] of bytes 2c, and of 2c + 1
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        Fp8x4ToHalf2x2<TC>(__byte_perm(bv[2 * slice + half], 0, 0x3120), even[half], odd[half]);
      }
      Mma<__half>::Run(st.o[4 * dn + 2 * slice], a, even[0], even[1]);
      Mma<__half>::Run(st.o[4 * dn + 2 * slice + 1], a, odd[0], odd[1]);
    }
  }
}

// The head dim of O's accumulators st.o[dt][e] (e = 0, 1; e + 2 the same of row + 8) for this
// lane: dt * 8 + 2 (lane % 4) + e on the 16-bit path; on the fp8 path n8 tile dt is head dims
// 2c + dt % 2 of the 16-byte slice (dt / 2) (ComputeTileFp8), c = its column 2 (lane % 4) + e.
template <bool kFp8>
__device__ __forceinline__ int FragmentColumn(int dt, int lane, int e) {
  if constexpr (kFp8) return (dt / 2) * 16 + 4 * (lane % 4) + 2 * e + dt % 2;
  return dt * 8 + 2 * (lane % 4) + e;
}

// Merges the warps' states through shared memory and writes the block's rows: out and lse
// directly (one split) or the split's partial output and lse.
// `v_scale` multiplies the output (its kv head's v_scale: 1 but for fp8 caches); kFp8: the
// accumulators' head dims are in the fp8 path's order (FragmentColumn).
template <typename T, int kHeadDim, int kWarps, bool kFp8>
__device__ __forceinline__ void MergeAndStore(const AttentionParams& p, int split, int b,
                                              int kv_head, int row_group, float v_scale,
                                              WarpState<kHeadDim>& st, unsigned char* merge) {
  using Tl = Tiling<kHeadDim, kWarps>;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float* o_s = reinterpret_cast<float*>(merge);                       // [warp][row][d]
  float* max_s = reinterpret_cast<float*>(merge + Tl::kMergeOBytes);  // [warp][row]
  float* sum_s = max_s + kWarps * kRows;                              // [warp][row]
  float* row_max_s = sum_s + kWarps * kRows;                          // [row]
  float* row_sum_s = row_max_s + kRows;                               // [row]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.row_sum[h] += __shfl_xor_sync(0xffffffffu, st.row_sum[h], 1);
    st.row_sum[h] += __shfl_xor_sync(0xffffffffu, st.row_sum[h], 2);
    if (lane % 4 == 0) {
      max_s[warp * kRows + lane / 4 + 8 * h] = st.row_max[h];
      sum_s[warp * kRows + lane / 4 + 8 * h] = st.row_sum[h];
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, max_s[w * kRows + threadIdx.x]);
    const float base = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      sum += sum_s[w * kRows + threadIdx.x] * exp2f(max_s[w * kRows + threadIdx.x] - base);
    }
    row_max_s[threadIdx.x] = mx;
    row_sum_s[threadIdx.x] = sum;
  }
  // Each warp's rows rescaled to the merged max (a warp that saw nothing has all zeros).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = lane / 4 + 8 * h;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, max_s[w * kRows + r]);
    const float factor = st.row_max[h] == -INFINITY ? 0.0f : exp2f(st.row_max[h] - mx);
    float* dst = o_s + (warp * kRows + r) * kHeadDim;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      dst[FragmentColumn<kFp8>(dt, lane, 0)] = st.o[dt][2 * h] * factor;
      dst[FragmentColumn<kFp8>(dt, lane, 1)] = st.o[dt][2 * h + 1] * factor;
    }
  }
  __syncthreads();

  const int sq = static_cast<int>(p.args.seq_len_q);
  const int64_t hq_base = static_cast<int64_t>(kv_head) * p.group;
  for (int c = threadIdx.x; c < kRows * Tl::kChunks; c += Tl::kThreads) {
    const int r = c / Tl::kChunks;
    const int col = c % Tl::kChunks;
    const int m = row_group * kRows + r;
    if (m >= p.rows) continue;
    const int i = m % sq;
    const int64_t hq = hq_base + m / sq;
    const float sum = row_sum_s[r];
    const float inv = sum > 0.0f ? v_scale / sum : 0.0f;
    float acc[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float* src = o_s + (w * kRows + r) * kHeadDim + col * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += src[j];
    }
    if (p.num_splits == 1) {
      alignas(16) T vals[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) vals[j] = FromFloat<T>(acc[j] * inv);
      T* out = static_cast<T*>(p.args.out) +
               ((static_cast<int64_t>(b) * sq + i) * p.args.num_heads_q + hq) * kHeadDim + col * 8;
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(vals);
    } else {
      const int64_t row =
          ((static_cast<int64_t>(split) * p.args.batch + b) * p.args.num_heads_q + hq) * sq + i;
      float4* dst = reinterpret_cast<float4*>(p.partial_out + row * kHeadDim + col * 8);
      dst[0] = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      dst[1] = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
    }
    if (col == 0) {
      const float lse = sum > 0.0f ? (row_max_s[r] + log2f(sum)) * kLn2 : -INFINITY;
      const int64_t lse_row = (static_cast<int64_t>(b) * p.args.num_heads_q + hq) * sq + i;
      if (p.num_splits > 1) {
        p.partial_lse[static_cast<int64_t>(split) * p.args.batch * p.args.num_heads_q * sq +
                      lse_row] = lse;
      } else if (p.args.lse != nullptr) {
        p.args.lse[lse_row] = lse;
      }
    }
  }
}

// The first token any query of a sequence of length `len` may see (the window's start for its
// first query). They all end at len: the last query, at len - 1, sees len - 1 at least.
__device__ __forceinline__ int FirstToken(const AttentionParams& p, int len) {
  if (p.window_left < 0) return 0;
  const int64_t first = static_cast<int64_t>(len) - p.args.seq_len_q - p.window_left;
  return first > 0 ? static_cast<int>(first) : 0;
}

// Whether some real row misses some token of the tile first .. first + tile_n - 1: the last
// tile (past len), causal tiles reaching past the first query's position, any window. Most
// tiles of a decode step need no mask, and the per-element test is a fifth of a tile's
// instructions.
__device__ __forceinline__ bool TileNeedsMask(const AttentionParams& p, int first, int tile_n,
                                              int len) {
  const int last = first + tile_n - 1;
  if (last >= len || p.window_left >= 0 || p.window_right >= 0) return true;
  return p.args.causal && last > len - static_cast<int>(p.args.seq_len_q);
}

// grid (splits, Hkv * row_groups, B).
// The registers of a thread are held to what PagedBlocksPerSm blocks leave it.
template <typename T, typename TC, int kHeadDim, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, PagedBlocksPerSm(kHeadDim, sizeof(TC) == 1))
    PagedAttentionKernel(const __grid_constant__ AttentionParams p) {
  using Tl = Tiling<kHeadDim, kWarps, sizeof(TC)>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  unsigned char* ring = smem + Tl::kQBytes;
  float* scratch = reinterpret_cast<float*>(ring + Tl::kRingBytes);  // fp8: QToHalfForFp8's
  auto stage = [&](int i) { return ring + (i % Tl::kStages) * 2 * Tl::kRingTileBytes; };
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.row_groups;
  const int row_group = blockIdx.y % p.row_groups;
  const int b = blockIdx.z;
  const int len = p.args.cache_seqlens[b];
  const int lane = threadIdx.x % 32;
  const float k_scale = p.args.k_scale != nullptr ? p.args.k_scale[kv_head] : 1.0f;
  const float v_scale = p.args.v_scale != nullptr ? p.args.v_scale[kv_head] : 1.0f;
  BlockScale scale = {p.args.softmax_scale * k_scale, p.scale_log2 * k_scale};

  // This split's tiles of the sequence's visible tokens [first, len).
  const int first = FirstToken(p, len);
  const int tiles = len > first ? (len - first + Tl::kTileN - 1) / Tl::kTileN : 0;
  const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
  const int tile_begin = min(tiles, split * per_split);
  const int tile_end = min(tiles, tile_begin + per_split);

  const RowInfo rows[2] = {RowOf(p, row_group, lane / 4, len),
                           RowOf(p, row_group, lane / 4 + 8, len)};
  const bool upper = row_group * kRows + 8 < p.rows;  // rows 8-15 hold a real row
  WarpState<kHeadDim> st;
#pragma unroll
  for (int dt = 0; dt < kHeadDim / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[dt][e] = 0.0f;
  }
  st.row_max[0] = st.row_max[1] = -INFINITY;
  st.row_sum[0] = st.row_sum[1] = 0.0f;

  if (tile_begin < tile_end) {
    LoadQ<T, kHeadDim, kWarps>(p, b, kv_head, row_group, q_s);
    int32_t pages[Tl::kRowsPerThread];
#pragma unroll
    for (int s = 0; s < Tl::kStages - 1; ++s) {
      const int tile = tile_begin + s;
      if (tile < tile_end) {
        LoadPages<Tl>(p, b, first + tile * Tl::kTileN, len, pages);
        LoadTile<TC, Tl>(p, kv_head, first + tile * Tl::kTileN, len, pages, stage(s));
      }
      CommitCopies();  // empty groups keep the count the waits below assume
    }
    // The next tile to issue; with kPrefetchPages, `pages` holds its entries.
    int issue = tile_begin + Tl::kStages - 1;
    if constexpr (Tl::kPrefetchPages) {
      if (issue < tile_end) LoadPages<Tl>(p, b, first + issue * Tl::kTileN, len, pages);
    }
    for (int tile = tile_begin; tile < tile_end; ++tile) {
      WaitCopies<Tl::kStages - 2>();
      // The tile is visible to all, and the slot loaded next was read by all last iteration.
      __syncthreads();
      if (issue < tile_end) {
        if constexpr (!Tl::kPrefetchPages) {
          LoadPages<Tl>(p, b, first + issue * Tl::kTileN, len, pages);
        }
        LoadTile<TC, Tl>(p, kv_head, first + issue * Tl::kTileN, len, pages,
                         stage(issue - tile_begin));
        ++issue;
        if constexpr (Tl::kPrefetchPages) {
          if (issue < tile_end) LoadPages<Tl>(p, b, first + issue * Tl::kTileN, len, pages);
        }
      }
      CommitCopies();
      const int tile_first = first + tile * Tl::kTileN;
      const bool masked = TileNeedsMask(p, tile_first, Tl::kTileN, len);
      if constexpr (Tl::kFp8) {
        if (tile == tile_begin) {
          scale = QToHalfForFp8<T, kHeadDim, kWarps>(q_s, scratch, scale);
          __syncthreads();
        }
        ComputeTileFp8<TC, kHeadDim, kWarps>(p, scale, rows, upper, tile_first, len, masked,
                                             reinterpret_cast<const __half*>(q_s),
                                             stage(tile - tile_begin), st);
      } else {
        ComputeTile<T, kHeadDim, kWarps>(p, scale, rows, upper, tile_first, len, masked, q_s,
                                         reinterpret_cast<const T*>(stage(tile - tile_begin)), st);
      }
    }
    WaitCopies<0>();
  }
  // The combine pass may take SM slots as this block's last stores go.
  AllowNextGrid();
  __syncthreads();  // the pipeline's memory becomes the merge's
  MergeAndStore<T, kHeadDim, kWarps, Tl::kFp8>(p, split, b, kv_head, row_group, v_scale, st,
                                               smem + Tl::kQBytes);
}

// The combine pass: one block per output row (b, hq, i) merges the splits' partial outputs by
// their lse. Every split block writes its rows (zeros and lse -inf when it saw nothing), so
// every partial is read without a test. The loads are issued side by side, not one split
// after another: the partial outputs with kSlices threads a column, each summing every
// kSlices-th split (the first kCombinePreload of them issued before the weights), beside the
// splits' lse by the block's threads at once (a loop over splits with one load waiting on the
// last took a round trip to L2 per split: about 5 us at 16 splits, the larger part of a small
// batch's step).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    PagedCombineKernel(const __grid_constant__ AttentionParams p) {
  constexpr int kColumns = kHeadDim / 4;  // float4 columns of a row
  constexpr int kSlices = kCombineThreads / kColumns;
  static_assert(kCombineThreads % kColumns == 0 && kSlices >= 1, "whole slices of the row");
  __shared__ float weight_s[kPagedMaxSplits];
  __shared__ float4 acc_s[kSlices][kColumns];
  __shared__ float total_s[2];  // the lse's max and the weights' sum
  const int64_t sq = p.args.seq_len_q;
  const int64_t rows = p.args.batch * p.args.num_heads_q * sq;
  const int64_t row = blockIdx.x;
  const int splits = p.num_splits;
  const int col = threadIdx.x % kColumns;
  const int slice = threadIdx.x / kColumns;
  auto partial = [&](int s) {
    return reinterpret_cast<const float4*>(p.partial_out + (s * rows + row) * kHeadDim)[col];
  };
  WaitForPriorGrid();  // the attention kernel's partials
  // The first kCombinePreload partial outputs this thread sums are loaded before the weights
  // are known: their round trip to L2 overlaps the lse's, not follows it.
  float4 early[kCombinePreload];
#pragma unroll
  for (int j = 0; j < kCombinePreload; ++j) {
    if (slice + j * kSlices < splits) early[j] = partial(slice + j * kSlices);
  }
  for (int s = threadIdx.x; s < splits; s += kCombineThreads) {
    weight_s[s] = p.partial_lse[s * rows + row];
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, weight_s[s]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
    }
    float sum = 0.0f;
    for (int s = lane; s < splits; s += 32) {
      const float w = mx == -INFINITY ? 0.0f : __expf(weight_s[s] - mx);
      weight_s[s] = w;
      sum += w;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) {
      total_s[0] = mx;
      total_s[1] = sum;
    }
  }
  __syncthreads();
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kCombinePreload; ++j) {
    const int s = slice + j * kSlices;
    if (s < splits) {
      const float w = weight_s[s];
      acc.x += w * early[j].x;
      acc.y += w * early[j].y;
      acc.z += w * early[j].z;
      acc.w += w * early[j].w;
    }
  }
#pragma unroll 4
  for (int s = slice + kCombinePreload * kSlices; s < splits; s += kSlices) {
    const float4 x = partial(s);
    const float w = weight_s[s];
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  acc_s[slice][col] = acc;
  __syncthreads();
  if (slice != 0) return;
  for (int other = 1; other < kSlices; ++other) {
    const float4 x = acc_s[other][col];
    acc.x += x.x;
    acc.y += x.y;
    acc.z += x.z;
    acc.w += x.w;
  }
  const float sum = total_s[1];
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  // row = (b * Hq + hq) * Sq + i; out is [B, Sq, Hq, D].
  const int64_t i = row % sq;
  const int64_t bh = row / sq;
  const int64_t hq = bh % p.args.num_heads_q;
  const int64_t b = bh / p.args.num_heads_q;
  alignas(8) T vals[4] = {FromFloat<T>(acc.x * inv), FromFloat<T>(acc.y * inv),
                          FromFloat<T>(acc.z * inv), FromFloat<T>(acc.w * inv)};
  T* out =
      static_cast<T*>(p.args.out) + ((b * sq + i) * p.args.num_heads_q + hq) * kHeadDim + col * 4;
  *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(vals);
  if (col == 0 && p.args.lse != nullptr) {
    p.args.lse[row] = sum > 0.0f ? total_s[0] + logf(sum) : -INFINITY;
  }
}

inline int ClampWindow(int64_t w) {
  if (w < 0) return -1;
  return w > INT_MAX / 2 ? INT_MAX / 2 : static_cast<int>(w);
}

// `head_bytes`: bytes of one kv head's row in the caches (D x the element size). The kernel
// numbers token slots and measures a slot's bytes in 32 bits (LoadTileOf): 2^32 slots of at
// least 64 bytes would be 256 GiB of cache.
inline bool ValidArgs(const PagedDeviceArgs& a, int64_t head_bytes, int num_splits,
                      const void* workspace) {
  if (a.batch < 0 || a.seq_len_q <= 0 || a.num_heads_kv <= 0 || a.num_heads_q <= 0 ||
      a.num_heads_q % a.num_heads_kv != 0 || a.page_size <= 0 || a.max_pages < 0 ||
      a.num_pages < 0) {
    return false;
  }
  if (a.num_pages > int64_t{UINT32_MAX} / a.page_size ||
      a.num_heads_kv > int64_t{UINT32_MAX} / head_bytes) {
    return false;
  }
  if (num_splits < 1 || num_splits > kPagedMaxSplits) return false;
  return num_splits == 1 || workspace != nullptr;
}

// A set of device ordinals, those below 64 (others are never members): what one kernel instance
// has already asked or set up per device, held in a function-local static so that a decode step
// makes no driver call for it. Thread-safe: a lost race only repeats the caller's idempotent
// work; a member added after another (Add's release, Has's acquire) is seen with it.
class DeviceSet {
 public:
  bool Has(int device) const { return (bits_.load(std::memory_order_acquire) & Bit(device)) != 0; }
  void Add(int device) { bits_.fetch_or(Bit(device), std::memory_order_release); }

 private:
  static uint64_t Bit(int device) { return device >= 0 && device < 64 ? uint64_t{1} << device : 0; }
  std::atomic<uint64_t> bits_{0};
};

// Whether `kernel`, as it runs on the current device `device`, was compiled for sm_90 or later
// (its PTX version), so that its WaitForPriorGrid waits and it may be a dependent launch: not
// in an sm_80 build, nor where the driver compiles the sm_80 PTX for a newer GPU (launched
// early there, it would read what the kernel before it has not written yet). Asked once per
// kernel and device.
template <typename Kernel>
cudaError_t WaitsForPriorGrid(Kernel* kernel, int device, bool* waits) {
  static DeviceSet known;
  static DeviceSet yes;
  if (known.Has(device)) {
    *waits = yes.Has(device);
    return cudaSuccess;
  }
  cudaFuncAttributes attributes{};
  KS_PAGED_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, kernel));
  *waits = attributes.ptxVersion >= 90;
  if (*waits) yes.Add(device);
  known.Add(device);
  return cudaSuccess;
}

// Launches `kernel(p)` on `stream`, as a programmatic dependent launch when `pdl`.
template <typename Kernel>
cudaError_t LaunchOnStream(Kernel* kernel, dim3 grid, int threads, size_t smem, bool pdl,
                           const AttentionParams& p, cudaStream_t stream) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = pdl ? &attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, p);
}

}  // namespace paged

template <typename T, typename TC, int kHeadDim, int kWarps>
cudaError_t LaunchPagedAttention(const PagedDeviceArgs& args, int num_splits, void* workspace,
                                 cudaStream_t stream) {
  using Tl = paged::Tiling<kHeadDim, kWarps, sizeof(TC)>;
  if (!paged::ValidArgs(args, int64_t{kHeadDim} * sizeof(TC), num_splits, workspace)) {
    return cudaErrorInvalidValue;
  }
  if (args.batch == 0) return cudaSuccess;
  paged::AttentionParams p;
  p.args = args;
  p.num_splits = num_splits;
  p.group = static_cast<int>(args.num_heads_q / args.num_heads_kv);
  p.rows = static_cast<int>(p.group * args.seq_len_q);
  p.row_groups = (p.rows + paged::kRows - 1) / paged::kRows;
  p.window_left = paged::ClampWindow(args.window_left);
  p.window_right = paged::ClampWindow(args.window_right);
  p.scale_log2 = args.softmax_scale * paged::kLog2e;
  if ((args.page_size & (args.page_size - 1)) == 0) {
    while ((int64_t{1} << (p.page_shift + 1)) <= args.page_size) ++p.page_shift;
  }
  if (num_splits > 1) {
    const size_t rows = static_cast<size_t>(args.batch * args.num_heads_q * args.seq_len_q);
    p.partial_out = static_cast<float*>(workspace);
    p.partial_lse =
        reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                 paged::AlignUp(rows * num_splits * kHeadDim * sizeof(float)));
  }
  const int64_t grid_y = args.num_heads_kv * p.row_groups;
  if (grid_y > 65535 || args.batch > 65535) return cudaErrorInvalidConfiguration;
  auto* kernel = &paged::PagedAttentionKernel<T, TC, kHeadDim, kWarps>;
  // The shared-memory limit is a per-device property of the function, raised once per device.
  static paged::DeviceSet smem_raised;
  int device = 0;
  KS_PAGED_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (!smem_raised.Has(device)) {
    KS_PAGED_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tl::kSmemBytes)));
    smem_raised.Add(device);
  }
  // Not a dependent launch itself: the blocks of a launch that waits would take SM slots as the
  // kernel before it drains, unevenly (back to back, one split at 32 x 4k-16k took 3-4% longer
  // on an H200).
  const dim3 grid(num_splits, static_cast<unsigned>(grid_y), static_cast<unsigned>(args.batch));
  KS_PAGED_RETURN_IF_ERROR(
      paged::LaunchOnStream(kernel, grid, Tl::kThreads, Tl::kSmemBytes, false, p, stream));
  if (num_splits == 1) return cudaSuccess;
  const int64_t rows = args.batch * args.num_heads_q * args.seq_len_q;
  if (rows > INT_MAX) return cudaErrorInvalidConfiguration;
  // The combine pass is, where it waits: its blocks start as the attention blocks finish.
  auto* combine = &paged::PagedCombineKernel<T, kHeadDim>;
  bool pdl = false;
  KS_PAGED_RETURN_IF_ERROR(paged::WaitsForPriorGrid(combine, device, &pdl));
  return paged::LaunchOnStream(combine, dim3(static_cast<unsigned>(rows)), paged::kCombineThreads,
                               0, pdl, p, stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_CUDA_PAGED_ATTENTION_DEVICE_CUH_
