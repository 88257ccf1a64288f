// The flash attention backward kernel for Hopper (sm_90a: wgmma), included by the per-head-dim
// .cu files beside the mma.sync kernels of flash_attention_bwd_device.cuh.
//
// One kernel computes dK, dV and dQ (FlashAttention-2's loop, on warpgroup MMAs). A block
// takes a key tile of 128 rows of one kv head and streams the query tiles of 64 rows, of every
// query head of the group, that can see those keys; under a causal mask or a window each
// query head of a group has blocks of its own instead (FlashBwdGroupSplit), which add their
// dK and dV into an fp32 workspace at the end, in turn. Its three warpgroups have roles:
//
//   warpgroup 0, warps 0-1   loaders: Q, dO, lse and D of the next query items into two stages
//   warpgroup 0, warps 2-3   dQ reducers, one a dQ buffer: add each finished dQ tile to the
//                            fp32 workspace
//   warpgroups 1 and 2       consumers, 64 keys each:
//     S^T = K Q^T, dP^T = V dO^T             wgmma, both operands in shared memory
//     P^T = exp(logits - lse)                registers (masks, bias and soft cap as the forward)
//     dS^T = P^T (dP^T - D)                  registers; also stored to shared memory
//     dV += P^T dO, dK += dS^T Q             wgmma, P^T and dS^T from registers
//     dQ_tile = dS K                         wgmma, dS read transposed from shared memory
//
// The roles meet at named barriers (a stage is full / empty, a dQ buffer is full / empty, both
// consumers' dS^T is stored), so the tensor cores go on while a stage loads and while a dQ
// tile is added. Warpgroup 0 hands most of its registers to the consumers (setmaxnreg).
//
// Each consumer takes half of dQ_tile's columns; the tile goes through shared memory (fp32,
// two buffers) and one bulk reduction adds it to a workspace (dq_accum) that a last kernel
// scales and rounds into dq. With a lock array the blocks that add to one query tile take
// turns in a fixed order, so the sums run in the same order every time and the same inputs
// give the same bits; without one they add in any order. The order is the last key tile
// first: under a causal mask the block of key tile n + 1 reached each query tile two
// iterations before the block of key tile n, so nobody waits, and the grid's x runs the key
// tiles from the last, so that a block only ever waits for blocks launched before it.
//
// Q and dO, K and V sit in shared memory in the 128-byte-swizzled layout of the forward's
// wgmma kernel (flash_attention_wgmma.cuh), loaded by cp.async.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_bwd_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_device.cuh"
#include "kernels/flash_attention/cuda/flash_attention_bwd_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_wgmma_block.cuh"
#include "kernels/flash_attention/cuda/flash_attention_wgmma.cuh"
#include "kernels/flash_attention/cuda/hopper_sync.cuh"

namespace kernelserve::cuda::flash {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d (+)= A B over one k16 step, A and B both read MN-major, for N = kN (32 or 64) columns.
template <bool kBf16, int kN>
__device__ __forceinline__ void MmaSsTransposed(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                                int scale) {
  if constexpr (kN == 32) {
    wgmma::MmaSs32<kBf16, 1, 1>(d, a, b, scale);
  } else {
    static_assert(kN == 64, "N is 32 or 64");
    wgmma::MmaSs64<kBf16, 1, 1>(d, a, b, scale);
  }
}

// Starts the loaders' copies of item `it` (Q, dO, lse and D) into stage it % 2; one commit
// group, empty when it >= b.items.
template <typename T, int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void LoadQueryItem(const FlashBwdDeviceArgs& a, const BwdKeyBlock& b,
                                              const BwdWgmmaTiles<kD, kBlockQ, kBlockK>& s,
                                              int it) {
  using Tiles = BwdWgmmaTiles<kD, kBlockQ, kBlockK>;
  if (it < b.items) {
    const FlashDeviceArgs& p = a.fwd;
    const int64_t q_stride = p.num_heads_q * kD;
    const int stage = it % 2;
    const int64_t head = b.Head(it);
    const int64_t i0 = b.Row0<kBlockQ>(it);
    const int64_t offset = (b.span.q_begin + i0) * q_stride + head * kD;
    const int64_t valid = b.span.q_len - i0;
    LoadTileSw128<T, kD, kBlockQ, kBwdLoaderThreads>(
        s.q + stage * Tiles::kQBytes, static_cast<const T*>(p.q) + offset, q_stride, valid);
    LoadTileSw128<T, kD, kBlockQ, kBwdLoaderThreads>(
        s.dout + stage * Tiles::kQBytes, static_cast<const T*>(a.dout) + offset, q_stride, valid);
    // lse and D of rows past the sequence are 0: only the masked path sees them (P = 0 there).
    for (int x = threadIdx.x; x < kBlockQ; x += kBwdLoaderThreads) {
      const bool ok = x < valid;
      const int64_t index = LseIndex(p, b.span, b.seq, head, ok ? i0 + x : 0);
      CopyAsync4(SharedAddress(s.lse + stage * kBlockQ + x), p.lse + index, ok);
      CopyAsync4(SharedAddress(s.dsum + stage * kBlockQ + x), a.dsum + index, ok);
    }
  }
  CommitCopies();
}

// The loaders' loop: item it is announced full as soon as its copies are done (while the
// consumers work on item it - 1), then item it + 1 starts in the other stage once the
// consumers released it (item it - 1). So a full stage is waiting whenever the consumers
// finish one, and the copies have a whole item's time.
template <typename T, int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void LoadQueryItems(const FlashBwdDeviceArgs& a, const BwdKeyBlock& b,
                                               const BwdWgmmaTiles<kD, kBlockQ, kBlockK>& s) {
  LoadQueryItem<T, kD, kBlockQ, kBlockK>(a, b, s, 0);
  for (int it = 0; it < b.items; ++it) {
    WaitCopies<0>();
    FenceProxyAsync();
    BarArrive(kBarStageFull + it % 2, kBwdStageThreads);
    if (it + 1 < b.items) {
      if (it >= 1) BarSync(kBarStageEmpty + (it + 1) % 2, kBwdStageThreads);
      LoadQueryItem<T, kD, kBlockQ, kBlockK>(a, b, s, it + 1);
    }
  }
}

// A dQ reducer's loop (one warp a dQ buffer, the items it % 2 == buffer): adds each dQ tile
// the consumers finished to dq_accum with one bulk reduction from lane 0, after the blocks
// before this one in the tile's order (lock), and hands the buffer back as soon as it has been
// read. Two reducers, so that one waits for its turn or its addition while the other works.
template <int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void ReduceDqTiles(const FlashBwdDeviceArgs& a, const BwdKeyBlock& b,
                                              uint32_t sdq, int buffer) {
  const FlashDeviceArgs& p = a.fwd;
  const bool leader = threadIdx.x % 32 == 0;
  const int64_t lock_tiles = FlashBwdLockTiles(p, kBlockQ);
  for (int it = buffer; it < b.items; it += 2) {
    BarSync(kBarDqFull + buffer, kBwdDqThreads);
    int* lock = nullptr;
    int rank = 0;
    if (leader) {
      const int64_t head = b.Head(it);
      const int64_t i0 = b.Row0<kBlockQ>(it);
      if (a.dq_locks != nullptr) {
        lock = a.dq_locks + (b.seq * p.num_heads_q + head) * lock_tiles + i0 / kBlockQ;
        // The blocks adding to this tile run from the last key tile that sees one of its rows.
        rank = static_cast<int>(
            LastKeyTileSeeing(p, b.span, min(i0 + kBlockQ, b.span.q_len) - 1, kBlockK) - b.n);
        while (LoadRelaxed(lock) != rank) {
        }
        FenceAcquire();  // once: an acquiring load would empty the L1 cache at every try
      }
      const int64_t rows = min(int64_t{kBlockQ}, b.span.q_len - i0);
      BulkReduceAdd(a.dq_accum + (head * p.total_q + b.span.q_begin + i0) * kD,
                    sdq + buffer * (kBlockQ * kD * 4u), static_cast<uint32_t>(rows * kD * 4));
      BulkWaitRead();
    }
    __syncwarp();
    if (it + 2 < b.items) BarArrive(kBarDqEmpty + buffer, kBwdDqThreads);
    if (lock != nullptr) {
      BulkWaitComplete();  // the additions are done; the release makes them visible first
      StoreRelease(lock, rank + 1);
    }
  }
  if (leader) BulkWaitComplete();
  if (b.split > 1) BarArrive(kBarTail, kBwdTailThreads);  // the dQ buffers are read
}

// A consumer's end when the group is split (FlashBwdGroupSplit > 1): its 64 rows of dK (times
// the softmax scale) and dV go to shared memory as fp32 rows in dkv_accum's layout, over the
// stages and buffers the items used (free once every consumer and reducer is done with them),
// and one bulk reduction each adds them to dkv_accum, after the parts before this one (lock).
template <int kD, int kBlockK>
__device__ __forceinline__ void AddKeyGradients(const FlashBwdDeviceArgs& a, const BwdKeyBlock& b,
                                                uint32_t tiles, const float (&dk)[kD / 8][4],
                                                const float (&dv)[kD / 8][4], int wg) {
  const FlashDeviceArgs& p = a.fwd;
  const int warp = threadIdx.x / 32 % 4;
  const int lane = threadIdx.x % 32;
  constexpr uint32_t kHalfBytes = 64u * kD * 4u;
  const uint32_t sdk = tiles + wg * kHalfBytes;  // dK's rows, then dV's at + 2 halves
  const uint32_t sdv = tiles + (2 + wg) * kHalfBytes;
  const int64_t k_row0 = b.span.k_begin + b.j0 + wg * 64;  // dkv_accum's row of row 0
  BarSync(kBarTail, kBwdTailThreads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + lane / 4 + 8 * r;
#pragma unroll
    for (int d = 0; d < kD / 8; ++d) {
      const uint32_t at = (row * kD + DqAccumColumn(k_row0 + row, d * 8 + 2 * (lane % 4))) * 4u;
      StoreShared64(sdk + at, dk[d][2 * r] * p.softmax_scale, dk[d][2 * r + 1] * p.softmax_scale);
      StoreShared64(sdv + at, dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
  FenceProxyAsync();
  BarSync(kBarKeyHalf + wg, 128);
  const int64_t rows = min(int64_t{64}, b.span.k_len - (b.j0 + wg * 64));
  if (threadIdx.x % 128 != 0 || rows <= 0) return;
  int* lock = nullptr;
  if (a.dkv_locks != nullptr) {
    const int64_t tiles_k = FlashBwdKeyTiles(a, kBlockK);
    lock = a.dkv_locks + ((b.seq * p.num_heads_kv + b.kv_head) * tiles_k + b.n) * 2 + wg;
    while (LoadRelaxed(lock) != static_cast<int>(b.part)) {
    }
    FenceAcquire();
  }
  const int64_t kv_values = p.num_heads_kv * p.total_k * kD;
  float* const dk_accum = a.dkv_accum + (b.kv_head * p.total_k + k_row0) * kD;
  BulkReduceAdd(dk_accum, sdk, static_cast<uint32_t>(rows * kD * 4));
  BulkReduceAdd(dk_accum + kv_values, sdv, static_cast<uint32_t>(rows * kD * 4));
  BulkWaitComplete();
  if (lock != nullptr) StoreRelease(lock, static_cast<int>(b.part) + 1);
}

// A consumer's P^T and dS^T for one item (this warpgroup's 64 keys at rows key_row.. of the
// tile, the item's kBlockQ queries), as A fragments of the next products; dS^T also goes to
// the shared tile at `sds`.
template <typename T, int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void ProbabilityGradients(
    const FlashDeviceArgs& p, const BwdKeyBlock& b, int64_t head, int64_t i0, uint32_t k_rows,
    uint32_t v_rows, uint32_t tq, uint32_t tdo, const float* lse, const float* dsum, int key_row,
    uint32_t sds, uint32_t (&pa)[kBlockQ / 16][4], uint32_t (&dsa)[kBlockQ / 16][4]) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kSTiles = kBlockQ / 8;  // n8 tiles of S^T (query columns)
  const int t = threadIdx.x % 4;
  // acc = the warpgroup's 64 rows at `rows` (of a kBlockK-row tile) times the kBlockQ rows of
  // tile `tile`, transposed: k16 step ks reads 32 bytes into each 128-byte row of column
  // block ks / 4. One commit group.
  auto issue_by_rows = [](float(&acc)[kSTiles][4], uint32_t rows, uint32_t tile) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t step = (ks % 4) * 32u;
      MmaSs<kBf16, kBlockQ>(acc, Descriptor(rows + (ks / 4) * kBlockK * 128u + step, 16, 1024),
                            Descriptor(tile + (ks / 4) * kBlockQ * 128u + step, 16, 1024),
                            ks > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  float s[kSTiles][4], ds[kSTiles][4];
  WgmmaFence();
  issue_by_rows(s, k_rows, tq);
  issue_by_rows(ds, v_rows, tdo);
  WgmmaWait<1>();
  FenceRegisters(s);
  if (p.bias == nullptr && p.softcap <= 0.0f && p.q_segment_ids == nullptr) {
    // The common case inline: no call in the loop, so nothing is saved around one. Its dS
    // loop below repeats the per-pair case's without the cap on purpose: one loop after both
    // cases compiled to other spills and ran 4-30% slower (H100, 2026-11-27 03:20 UTC).
    const float scale_log2 = p.softmax_scale * kLog2e;
    const PairMask mask = PairMaskOf(p, b.span);
    const bool full = TileIsFull(p, b.span, i0, i0 + kBlockQ - 1, b.j0, b.j0 + kBlockK - 1);
    if (full) {
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = Exp2(s[nt][e] * scale_log2 - lse[nt * 8 + 2 * t + (e & 1)] * kLog2e);
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nt * 8 + 2 * t + (e & 1);
          const int j = static_cast<int>(b.j0) + key_row + 8 * (e >> 1);
          const float prob = Exp2(s[nt][e] * scale_log2 - lse[col] * kLog2e);
          s[nt][e] = mask.Visible(static_cast<int>(i0) + col, j) ? prob : 0.0f;
        }
      }
    }
    WgmmaWait<0>();
    FenceRegisters(ds);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        ds[nt][e] = s[nt][e] * (ds[nt][e] - dsum[nt * 8 + 2 * t + (e & 1)]);
    }
  } else {
    // A bias, a soft cap or segment ids: per pair, inline (a call would save every live
    // register, dK and dV included, around it).
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        const int64_t j = b.j0 + key_row + 8 * (e >> 1);
        s[nt][e] =
            PairProbability(p, b.span, b.seq, head, i0 + col, j, s[nt][e], lse[col] * kLog2e);
      }
    }
    WgmmaWait<0>();
    FenceRegisters(ds);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        ds[nt][e] = s[nt][e] * (ds[nt][e] - dsum[col]);
        if (p.softcap > 0.0f) {
          const int64_t j = b.j0 + key_row + 8 * (e >> 1);
          ds[nt][e] *= SoftcapDerivative(p, b.seq, head, i0 + col, j, s[nt][e], lse[col] * kLog2e);
        }
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < kBlockQ / 16; ++kk) {
    ProbabilityFragment<kBf16>(s, kk, pa[kk]);
    ProbabilityFragment<kBf16>(ds, kk, dsa[kk]);
  }
  // dS^T to shared memory: key rows of 64 query values (one 128-byte swizzle block).
#pragma unroll
  for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = key_row + 8 * r;
      const uint32_t at = sds + row * 128u + ((nt ^ (row % 8)) * 16u) + 4u * t;
      StoreShared32(at, Pack<kBf16>(ds[nt][2 * r], ds[nt][2 * r + 1]));
    }
  }
}

// A consumer's loop (warpgroup 1 + wg): item after item, once its stage is full, dV and dK of
// its 64 keys and its kD / 2 columns of the dQ tile, which goes to dQ buffer item % 2 for the
// reducer. Then dK and dV to global memory.
template <typename T, int kD, int kBlockQ, int kBlockK>
__device__ __forceinline__ void ConsumeQueryItems(const FlashBwdDeviceArgs& a, const BwdKeyBlock& b,
                                                  const BwdWgmmaTiles<kD, kBlockQ, kBlockK>& s,
                                                  int wg) {
  using Tiles = BwdWgmmaTiles<kD, kBlockQ, kBlockK>;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kDqCols = kD / 2;  // the columns of dQ a warpgroup takes
  const FlashDeviceArgs& p = a.fwd;
  const int warp = threadIdx.x / 32 % 4;  // in the warpgroup
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  float dk[kD / 8][4], dv[kD / 8][4];
#pragma unroll
  for (int d = 0; d < kD / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;
  }
  // This warpgroup's 64 keys of K and V: column block c at + c * kBlockK * 128.
  const uint32_t k_rows = s.k + wg * 64 * 128;
  const uint32_t v_rows = s.v + wg * 64 * 128;
  const int key_row = wg * 64 + warp * 16 + lane / 4;  // + 8 for e >= 2
  // This warpgroup's columns of dQ, [kDqCols * wg, kDqCols * (wg + 1)), in K's tile: column
  // block, then bytes into its 128-byte rows. No branch depends on the warpgroup: a divergent
  // path would serialize the warpgroup MMAs.
  const int dq_col0 = wg * kDqCols;
  const uint32_t k_cols = s.k + (dq_col0 / 64) * kBlockK * 128u + (dq_col0 % 64) * 2u;
  for (int it = 0; it < b.items; ++it) {
    const int stage = it % 2;
    BarSync(kBarStageFull + stage, kBwdStageThreads);
    const uint32_t tq = s.q + stage * Tiles::kQBytes;
    const uint32_t tdo = s.dout + stage * Tiles::kQBytes;
    const uint32_t sds = s.ds + stage * Tiles::kDsBytes;
    uint32_t pa[kBlockQ / 16][4], dsa[kBlockQ / 16][4];
    ProbabilityGradients<T, kD, kBlockQ, kBlockK>(p, b, b.Head(it), b.Row0<kBlockQ>(it), k_rows,
                                                  v_rows, tq, tdo, s.lse + stage * kBlockQ,
                                                  s.dsum + stage * kBlockQ, key_row, sds, pa, dsa);
    // Three groups of products, k16 step kk taking queries [16 kk, 16 kk + 16) in the first
    // and the last: dV += P^T dO; this warpgroup's columns of dQ_tile = dS K over the block's
    // keys (A: dS^T's tile read transposed once both consumers stored theirs, B: the K tile
    // read MN-major); dK += dS^T Q, left running while dQ_tile is stored.
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBlockQ / 16; ++kk) {
      MmaRsTransB<kBf16, kD>(dv, pa[kk], Descriptor(tdo + kk * 2048u, kBlockQ * 128u, 1024));
    }
    WgmmaCommit();
    FenceProxyAsync();  // dS^T's stores before the tensor cores read them
    BarSync(kBarConsumers, kBwdConsumerThreads);
    float dq[kDqCols / 8][4];
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      MmaSsTransposed<kBf16, kDqCols>(dq, Descriptor(sds + kk * 2048u, kBlockK * 128u, 1024),
                                      Descriptor(k_cols + kk * 2048u, kBlockK * 128u, 1024),
                                      kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
#pragma unroll
    for (int kk = 0; kk < kBlockQ / 16; ++kk) {
      MmaRsTransB<kBf16, kD>(dk, dsa[kk], Descriptor(tq + kk * 2048u, kBlockQ * 128u, 1024));
    }
    WgmmaCommit();
    WgmmaWait<1>();  // dV and dQ_tile
    FenceRegisters(dv);
    FenceRegisters(pa);
    FenceRegisters(dq);
    // dQ_tile to buffer `stage` for the reducer: fp32 rows of kD in dq_accum's layout, whose
    // 16-byte chunks are swizzled by the row (DqAccumColumn), so that the 8 rows a warp writes
    // at once fall in different banks.
    if (it >= 2) BarSync(kBarDqEmpty + stage, kBwdDqThreads);
    const uint32_t sdq = s.dq + stage * Tiles::kDqBytes;
    const int64_t q_row0 = b.span.q_begin + b.Row0<kBlockQ>(it);  // dq_accum's row of row 0
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + lane / 4 + 8 * r;
#pragma unroll
      for (int nt = 0; nt < kDqCols / 8; ++nt) {
        const int col = DqAccumColumn(q_row0 + row, dq_col0 + nt * 8 + 2 * t);
        StoreShared64(sdq + (row * kD + col) * 4u, dq[nt][2 * r], dq[nt][2 * r + 1]);
      }
    }
    FenceProxyAsync();
    BarArrive(kBarDqFull + stage, kBwdDqThreads);
    WgmmaWait<0>();  // dK: the stage's Q is read
    FenceRegisters(dk);
    FenceRegisters(dsa);
    if (it + 2 < b.items) BarArrive(kBarStageEmpty + stage, kBwdStageThreads);
  }
  if (b.split > 1) {
    AddKeyGradients<kD, kBlockK>(a, b, s.q, dk, dv, wg);
    return;
  }
  const int64_t row0 = b.j0 + wg * 64 + warp * 16;
  const int64_t kv_stride = p.num_heads_kv * kD;
  T* const dk_out = static_cast<T*>(a.dk) + b.span.k_begin * kv_stride + b.kv_head * kD;
  T* const dv_out = static_cast<T*>(a.dv) + b.span.k_begin * kv_stride + b.kv_head * kD;
  StoreAccumulator<T, kBf16, kD>(dk_out, kv_stride, row0, b.span.k_len, dk, p.softmax_scale, lane);
  StoreAccumulator<T, kBf16, kD>(dv_out, kv_stride, row0, b.span.k_len, dv, 1.0f, lane);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int kD, int kBlockQ, int kBlockK>
__global__ void __launch_bounds__(kBwdThreads, 1) FlashBwdWgmmaKernel(const FlashBwdDeviceArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(kBlockK == 128 && kBlockQ == 64, "two consumers of 64 keys; dS^T rows of 64");
  static_assert(kD == 64 || kD == 128, "dQ: 32 or 64 columns a consumer");
  using Tiles = BwdWgmmaTiles<kD, kBlockQ, kBlockK>;
  static_assert(
      4 * Tiles::kQBytes + 2 * Tiles::kDsBytes + 2 * Tiles::kDqBytes >= 2 * kBlockK * kD * 4,
      "AddKeyGradients: fp32 dK and dV fit over the stages and buffers");
  const FlashDeviceArgs& p = a.fwd;
  extern __shared__ __align__(128) unsigned char bwd_wgmma_smem[];
  const BwdWgmmaTiles<kD, kBlockQ, kBlockK> s(bwd_wgmma_smem);
  {
    // K and V by every thread. The roles work out their block again after the split, so that
    // nothing but the shared memory stays live across it.
    const Span span = SpanOf(p, blockIdx.z);
    const int64_t j0 = (static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x) * kBlockK;
    if (j0 >= span.k_len) return;
    const int64_t kv_stride = p.num_heads_kv * kD;
    const int64_t kv_head = blockIdx.y / FlashBwdGroupSplit(p);
    const int64_t kv_offset = (span.k_begin + j0) * kv_stride + kv_head * kD;
    LoadTileSw128<T, kD, kBlockK, kBwdThreads>(s.k, static_cast<const T*>(p.k) + kv_offset,
                                               kv_stride, span.k_len - j0);
    LoadTileSw128<T, kD, kBlockK, kBwdThreads>(s.v, static_cast<const T*>(p.v) + kv_offset,
                                               kv_stride, span.k_len - j0);
    CommitCopies();
    WaitCopies<0>();
    FenceProxyAsync();
    __syncthreads();
  }
  // The warpgroup, read from lane 0 so that the compiler sees it uniform over each warp.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    ReleaseRegisters<24>();
    if (threadIdx.x < kBwdLoaderThreads) {
      LoadQueryItems<T, kD, kBlockQ, kBlockK>(a, KeyBlockOf<kBlockQ, kBlockK>(p), s);
    } else {
      ReduceDqTiles<kD, kBlockQ, kBlockK>(a, KeyBlockOf<kBlockQ, kBlockK>(p), s.dq,
                                          (threadIdx.x - kBwdLoaderThreads) / 32);
    }
  } else {
    ClaimRegisters<240>();
    ConsumeQueryItems<T, kD, kBlockQ, kBlockK>(a, KeyBlockOf<kBlockQ, kBlockK>(p), s,
                                               warpgroup - 1);
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace kernelserve::cuda::flash

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_BWD_WGMMA_CUH_
