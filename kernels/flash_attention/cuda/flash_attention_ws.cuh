// The warp-specialized flash attention forward kernel for Hopper (sm_90a), included by the
// per-head-dim .cu files beside the other two.
//
// A persistent kernel: one block per SM walks the work items (a tile of 64 query rows per
// consumer warpgroup, of one head of one sequence), in the order of the other kernels' grid:
// a head's query tiles from the last one (under a causal mask they see the most keys). Each
// block draws its next item from a counter in global memory (PlanWsSchedule), so that the
// blocks end together when items differ in length, and passes it to its consumers through a
// shared-memory slot. Warpgroup 0 is the producer: it gives most of its registers to the
// consumers (setmaxnreg) and one of its threads issues the tensor-memory-accelerator (TMA)
// loads of each item's Q tile and of its K and V tiles into a ring of kStages stages. Every
// buffer has a pair of mbarriers: full (its bytes have landed) and empty (every consumer warp
// is done reading it), so the next item's Q and first tiles load while the consumers finish
// the current one. The consumers run the pipeline of the wgmma kernel
// (flash_attention_wgmma.cuh) on those tiles: S = Q K^T of tile it issued together with
// O += P V of tile it - 1, the softmax of S while that product runs. With kPingPong the two
// consumer warpgroups take turns at the tensor cores (two named barriers): one issues its two
// products while the other is in its softmax or its epilogue.
//
// Tiles are read from the packed [rows, heads, D] tensors, so the last key tile of a sequence
// holds rows of the next one (or zeros past the tensor's end): their logits are masked, and
// the consumers zero those rows of V before P V reads them (0 x inf would be NaN).
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WS_CUH_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WS_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention/cuda/flash_attention_common.cuh"
#include "kernels/flash_attention/cuda/flash_attention_launch.h"
#include "kernels/flash_attention/cuda/flash_attention_wgmma.cuh"
#include "kernels/flash_attention/cuda/flash_tensor_maps.h"
#include "kernels/flash_attention/cuda/hopper_sync.cuh"

namespace kernelserve::cuda::flash {

// Registers per thread after the hand-over: the producer keeps 24 (one thread issues loads),
// the two consumer warpgroups take the rest of the 168 x 384 the launch gave (240 each).
constexpr int kWsProducerRegisters = 24;
constexpr int kWsConsumerRegisters = 240;

// Whether every key of a tile of kKeys keys carries segment `id` (> 0), from the tile's
// entries of FlashWsSchedule::key_chunk_segments: the same addresses in every lane, one load a
// chunk and no vote.
template <int kKeys>
__device__ __forceinline__ bool ChunksInSegment(const int64_t* chunks, int64_t id) {
  static_assert(kKeys % kFlashKeyChunk == 0, "whole chunks a tile");
  bool same = true;
#pragma unroll
  for (int c = 0; c < kKeys / kFlashKeyChunk; ++c) same &= chunks[c] == id;
  return same;
}

// Where a block's pieces sit in shared memory, every piece at a fixed offset from the Q tile,
// bias tiles or not (their mbarriers are always there). With bias tiles, each consumer's 64
// rows of the current key tile's bias (f32, columns in blocks of 32, 128-byte swizzled) sit at
// the next 1024 bytes after the mbarriers (FlashWsBiasBytes). One consumer warpgroup per 64
// query rows.
template <int kWidth, int kBlockQ, int kBlockK, int kStages>
struct WsLayout {
  static constexpr int kConsumers = kBlockQ / 64;
  static constexpr uint32_t kTileBytes = kBlockK * kWidth * 2;
  static constexpr uint32_t kBiasBytes = 64 * kBlockK * 4;  // one consumer's bias rows
  // q_full, q_empty, then k_full, k_empty, v_full, v_empty (kStages each), the item slot, then
  // bias_full and bias_empty (kConsumers each).
  static constexpr uint32_t kBarBytes = 8 * (3 + 4 * kStages + 2 * kConsumers);
  static constexpr uint32_t kBars = (kBlockQ + 2 * kStages * kBlockK) * kWidth * 2;
  static constexpr uint32_t kBias = (kBars + kBarBytes + 1023) / 1024 * 1024;
  uint32_t q;  // the Q tile: column block c of consumer w's rows at q + c * kBlockQ * 128 + w * 8K

  __device__ explicit WsLayout(uint32_t base) : q(base + ((1024 - (base % 1024)) % 1024)) {}
  __device__ uint32_t k() const { return q + kBlockQ * kWidth * 2; }  // stage s: + s * kTileBytes
  __device__ uint32_t v() const { return k() + kStages * kTileBytes; }
  __device__ uint32_t bias() const { return q + kBias; }  // consumer c's rows: + c * kBiasBytes
  __device__ uint32_t q_full() const { return q + kBars; }
  __device__ uint32_t q_empty() const { return q + kBars + 8; }
  __device__ uint32_t k_full(int s) const { return q + kBars + 8 * (2 + s); }
  __device__ uint32_t k_empty(int s) const { return q + kBars + 8 * (2 + kStages + s); }
  __device__ uint32_t v_full(int s) const { return q + kBars + 8 * (2 + 2 * kStages + s); }
  __device__ uint32_t v_empty(int s) const { return q + kBars + 8 * (2 + 3 * kStages + s); }
  // The item whose Q the producer loads next (-1: no more), written before q_full's arrival.
  __device__ uint32_t item() const { return q + kBars + 8 * (2 + 4 * kStages); }
  __device__ uint32_t bias_full(int c) const { return q + kBars + 8 * (3 + 4 * kStages + c); }
  __device__ uint32_t bias_empty(int c) const {
    return q + kBars + 8 * (3 + 4 * kStages + kConsumers + c);
  }
};

// One work item: query rows [q_start, q_start + block_q) of head `head` of sequence `seq`.
// Item w counts query tiles fastest, from the last one (under a causal mask it sees the most
// keys), then heads, then sequences (as the grid of the other kernels): the items in flight at
// once share their heads' K and V in L2. With a varlen tile prefix, only tiles with rows are
// counted: sequence i's Hq x n_i items start at Hq x prefix[i].
struct WsWork {
  int64_t seq;
  int64_t head;
  int64_t q_start;
  Span span;
  KeyTiles tiles;
  bool empty;  // past its sequence's query rows (varlen): nothing to do
};

// The number of items: with a tile prefix, Hq x its last value.
__device__ __forceinline__ int64_t WsItems(const FlashDeviceArgs& p, const FlashWsSchedule& sched,
                                           int q_tiles) {
  return p.num_heads_q * (sched.tile_prefix != nullptr ? sched.tile_prefix[p.num_sequences]
                                                       : q_tiles * p.num_sequences);
}

__device__ __forceinline__ WsWork WsWorkOf(const FlashDeviceArgs& p, const FlashWsSchedule& sched,
                                           int64_t w, int q_tiles, int block_q, int block_k) {
  WsWork work;
  if (sched.tile_prefix != nullptr) {
    // The sequence is the last i with Hq x prefix[i] <= w (sequences without rows have no
    // items: the search passes over them).
    const int64_t* prefix = sched.tile_prefix;
    int64_t lo = 0;
    int64_t hi = p.num_sequences;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (p.num_heads_q * prefix[mid] <= w) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const int64_t tiles = prefix[lo + 1] - prefix[lo];
    const int64_t rest = w - p.num_heads_q * prefix[lo];
    work.seq = lo;
    work.head = rest / tiles;
    work.q_start = (tiles - 1 - rest % tiles) * block_q;
  } else {
    const int64_t rest = w / q_tiles;
    work.q_start = (q_tiles - 1 - w % q_tiles) * block_q;
    work.head = rest % p.num_heads_q;
    work.seq = rest / p.num_heads_q;
  }
  work.span = SpanOf(p, work.seq);
  work.empty = work.q_start >= work.span.q_len;
  // (Computed for empty items too: a branch here costs the consumers registers.)
  work.tiles = KeyTilesOf(p, work.span, work.q_start, block_q, block_k);
  return work;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The producer's one thread: for each of the block's items, once the consumers are done with
// the previous one, the item's number into the item slot and its Q tile, then K and V of each
// key tile, each into its stage once the consumers have released it. Items past their
// sequence's rows are skipped; after the last item the slot gets -1.
template <int kWidth, int kBlockQ, int kBlockK, int kStages>
__device__ __forceinline__ void WsProduce(const WsLayout<kWidth, kBlockQ, kBlockK, kStages>& at,
                                          const FlashDeviceArgs& p, const FlashWsSchedule& sched,
                                          int q_tiles, const CUtensorMap* q_map,
                                          const CUtensorMap* k_map, const CUtensorMap* v_map,
                                          const CUtensorMap* bias_map) {
  constexpr int kBlocks = kWidth / 64;
  using Layout = WsLayout<kWidth, kBlockQ, kBlockK, kStages>;
  constexpr uint32_t kTileBytes = Layout::kTileBytes;
  auto next_item = [&](int64_t w) -> int64_t {
    return sched.next != nullptr ? gridDim.x + static_cast<int64_t>(atomicAdd(sched.next, 1ull))
                                 : w + gridDim.x;
  };
  // Tile `row` of k or v (map) into stage s, once the consumers have released it.
  auto load = [&](const CUtensorMap* map, uint32_t tile, uint32_t full, uint32_t empty,
                  uint32_t parity, int head, int row) {
    BarrierWait(empty, parity);
    BarrierExpectBytes(full, kTileBytes);
#pragma unroll
    for (int c = 0; c < kBlocks; ++c) {
      TmaLoad3d(tile + c * kBlockK * 128, map, c * 64, head, row, full);
    }
  };
  int loaded = 0;  // K/V tiles so far: tile g in stage g % kStages, round g / kStages
  int q_loads = 0;
  // The next item is drawn once this one's loads are issued: drawn earlier, a block holds an
  // item it cannot start yet, and causal calls ran 2-4% slower that way (H200, 2026-11-29).
  for (int64_t w = blockIdx.x;; w = next_item(w)) {
    const bool done = w >= WsItems(p, sched, q_tiles);
    WsWork work;
    if (!done) {
      work = WsWorkOf(p, sched, w, q_tiles, kBlockQ, kBlockK);
      if (work.empty) continue;
    }
    BarrierWait(at.q_empty(), (q_loads & 1) ^ 1);
    ++q_loads;
    asm volatile("st.shared.s64 [%0], %1;\n" ::"r"(at.item()), "l"(done ? int64_t{-1} : w)
                 : "memory");
    if (done || work.tiles.num_tiles == 0) {
      BarrierArrive(at.q_full());
      if (done) return;
      continue;
    }
    const int head = static_cast<int>(work.head);
    BarrierExpectBytes(at.q_full(), kBlockQ * kWidth * 2);
    const int q_row = static_cast<int>(work.span.q_begin + work.q_start);
#pragma unroll
    for (int c = 0; c < kBlocks; ++c) {
      TmaLoad3d(at.q + c * kBlockQ * 128, q_map, c * 64, head, q_row, at.q_full());
    }
    const int kv_head = static_cast<int>(work.head / (p.num_heads_q / p.num_heads_kv));
    const int end = loaded + work.tiles.num_tiles;
    // The item's plane of the bias (its (b, h) matrix), when the bias is read by tiles.
    const int bias_plane =
        bias_map == nullptr
            ? 0
            : static_cast<int>((work.seq * p.bias_batch_stride + work.head * p.bias_head_stride) /
                               (p.seq_len_q * p.seq_len_k));
    for (int row = static_cast<int>(work.span.k_begin + work.tiles.tile_begin * kBlockK);
         loaded < end; ++loaded, row += kBlockK) {
      const int s = loaded % kStages;
      const uint32_t parity = ((loaded / kStages) & 1) ^ 1;
      load(k_map, at.k() + s * kTileBytes, at.k_full(s), at.k_empty(s), parity, kv_head, row);
      if (bias_map != nullptr) {
        // Each consumer's 64 rows of this tile's bias, once it is done with the last tile's.
        const int key = static_cast<int>(row - work.span.k_begin);
#pragma unroll
        for (int c = 0; c < Layout::kConsumers; ++c) {
          BarrierWait(at.bias_empty(c), (loaded & 1) ^ 1);
          BarrierExpectBytes(at.bias_full(c), Layout::kBiasBytes);
#pragma unroll
          for (int b = 0; b < kBlockK / 32; ++b) {
            TmaLoad3d(at.bias() + c * Layout::kBiasBytes + b * 64 * 128, bias_map, key + 32 * b,
                      static_cast<int>(work.q_start) + 64 * c, bias_plane, at.bias_full(c));
          }
        }
      }
      load(v_map, at.v() + s * kTileBytes, at.v_full(s), at.v_empty(s), parity, kv_head, row);
    }
  }
}

// Zeroes rows [valid, kBlockK) of a kBlockK-row V tile (every column block) at `tile`, by the
// 128 threads of one warpgroup.
template <int kWidth, int kBlockK>
__device__ __forceinline__ void ZeroTailRows(uint32_t tile, int valid, int thread) {
  constexpr int kChunks = kWidth / 8;  // 16-byte chunks a row
  const int count = (kBlockK - valid) * kChunks;
  for (int i = thread; i < count; i += 128) {
    const int row = valid + i / kChunks;
    const uint32_t at = tile + Sw128Offset(kBlockK, row, (i % kChunks) * 8);
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int kD, int kBlockQ, int kBlockK, int kWarps, int kStages, bool kPingPong>
__global__ void __launch_bounds__(kWarps * 32, 1)
    FlashWsKernel(const FlashDeviceArgs p, const FlashWsSchedule sched, int q_tiles,
                  const __grid_constant__ CUtensorMap q_map,
                  const __grid_constant__ CUtensorMap k_map,
                  const __grid_constant__ CUtensorMap v_map,
                  const __grid_constant__ CUtensorMap bias_map, bool bias_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kConsumers = 2;
  constexpr int kWidth = FlashWgmmaWidth(kD);
  constexpr int kSTiles = kBlockK / 8;
  constexpr int kOTiles = kWidth / 8;
  static_assert(kWarps == 4 * (1 + kConsumers) && kBlockQ == 64 * kConsumers,
                "a producer warpgroup and two consumer warpgroups of 64 query rows");
  static_assert(kD % 16 == 0 && kBlockK % 16 == 0 && kStages >= 2, "whole k16 steps");
  using Layout = WsLayout<kWidth, kBlockQ, kBlockK, kStages>;

  extern __shared__ __align__(128) unsigned char ws_smem[];
  const Layout at(SharedAddress(ws_smem));
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Read from lane 0, so that the compiler sees it uniform over each warp: the branches below
  // run setmaxnreg, which whole warpgroups execute.
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0);

  if (threadIdx.x == 0) {
    BarrierInit(at.q_full(), 1);
    BarrierInit(at.q_empty(), 4 * kConsumers);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(at.k_full(s), 1);
      BarrierInit(at.v_full(s), 1);
      BarrierInit(at.k_empty(s), 4 * kConsumers);
      BarrierInit(at.v_empty(s), 4 * kConsumers);
    }
    if (bias_tiles) {
      for (int c = 0; c < kConsumers; ++c) {
        BarrierInit(at.bias_full(c), 1);
        BarrierInit(at.bias_empty(c), 4);  // the consumer's four warps
      }
    }
    FenceBarrierInit();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ReleaseRegisters<kWsProducerRegisters>();
    if (threadIdx.x == 0) {
      WsProduce(at, p, sched, q_tiles, &q_map, &k_map, &v_map, bias_tiles ? &bias_map : nullptr);
    }
    return;
  }
  ClaimRegisters<kWsConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int thread = threadIdx.x % 128;  // within the warpgroup
  const int t = lane % 4;
  const uint32_t q_rows = at.q + consumer * 64 * 128;
  const bool has_segments = p.q_segment_ids != nullptr;
  // Tiles every row sees whole take the softmax with the scale folded in when nothing else
  // changes the logits.
  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool plain_logits = p.bias == nullptr && p.softcap == 0.0f && scale_log2 > 0.0f;

  float o[kOTiles][4];
  float m[2], l[2], alpha[2];
  float s[kSTiles][4];
  uint32_t pa[kBlockK / 16][4];  // P of the previous tile as the A operand of P V

  auto release = [&](uint32_t bar) {
    if (lane == 0) BarrierArrive(bar);
  };
  // Ping-pong turns: consumer c waits on named barrier 3 + c before issuing its products and
  // then lets the other one go. Consumer 1 lets consumer 0 start; consumer 0 takes the last
  // hand-over after its final item, so that both barriers end balanced.
  auto take_turn = [&] {
    if constexpr (kPingPong) BarSync(3 + consumer, 256);
  };
  auto end_turn = [&] {
    if constexpr (kPingPong) BarArrive(3 + (1 - consumer), 256);
  };
  auto issue_s = [&](int stage) {
    IssueQkT<kBf16, kD, kBlockQ, kBlockK>(s, q_rows, at.k() + stage * Layout::kTileBytes);
  };
  auto issue_pv = [&](int stage) {
    IssuePv<kBf16, kWidth, kBlockK>(o, pa, at.v() + stage * Layout::kTileBytes);
  };
  auto to_operand = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) ProbabilityFragment<kBf16>(s, kk, pa[kk]);
  };

  if constexpr (kPingPong) {
    if (consumer == 1) BarArrive(3, 256);
  }
  int used = 0;  // K/V tiles consumed so far, counted as the producer counts its loads
  for (int q_loads = 0;; ++q_loads) {
    BarrierWait(at.q_full(), q_loads & 1);
    int64_t w;
    asm volatile("ld.shared.s64 %0, [%1];\n" : "=l"(w) : "r"(at.item()) : "memory");
    if (w < 0) break;
    const WsWork work = WsWorkOf(p, sched, w, q_tiles, kBlockQ, kBlockK);
    const KeyTiles& tiles = work.tiles;
    if (tiles.num_tiles == 0) {
      __syncwarp();  // every lane has read the slot
      release(at.q_empty());
    }
    const ThreadRows rows = ThreadRowsOf(work.q_start + consumer * 64 + (warp % 4) * 16, lane);
#pragma unroll
    for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
    auto stage = [&](int it) { return (used + it) % kStages; };
    auto parity = [&](int it) { return static_cast<uint32_t>(((used + it) / kStages) & 1); };
    auto first_key = [&](int it) { return (tiles.tile_begin + it) * kBlockK; };  // of tile it
    // Waits for tile it's V; the sequence's last tile, when partly past its keys, gets the
    // rest of its rows zeroed by this warpgroup first.
    auto wait_v = [&](int it) {
      BarrierWait(at.v_full(stage(it)), parity(it));
      const int64_t valid = work.span.k_len - first_key(it);
      if (valid < kBlockK) {
        ZeroTailRows<kWidth, kBlockK>(at.v() + stage(it) * Layout::kTileBytes,
                                      static_cast<int>(valid), thread);
        FenceProxyAsync();
        BarSync(1 + consumer, 128);
      }
    };
    // Whether every row sees every key of tile it, the mask's bounds aside.
    auto in_range = [&](int it) {
      const int64_t j0 = first_key(it);
      return j0 + kBlockK - 1 <= tiles.first_hi && j0 >= tiles.last_lo;
    };
    // With segment ids: the warp's rows' one segment (0: none). Whether a tile in range lies
    // in it is read in unmasked() from the key chunks' ids where the launch made them (one
    // word a chunk), else from the tile's key segment ids, in L1 where the tile before moved
    // them.
    const int64_t warp_segment = has_segments ? WarpSegment(p, work.span, work.seq, rows) : 0;
    auto key_chunks = [&](int it) {  // REQUIRES: sched.key_chunk_segments set
      const int64_t per_sequence = (p.seq_len_k + kFlashKeyChunk - 1) / kFlashKeyChunk;
      return sched.key_chunk_segments + work.seq * per_sequence + first_key(it) / kFlashKeyChunk;
    };
    auto segment_ids = [&](int it) {
      return p.kv_segment_ids + work.seq * p.seq_len_k + first_key(it);
    };
    auto prefetch_segments = [&](int it) {
      if (warp_segment == 0 || sched.key_chunk_segments != nullptr || it >= tiles.num_tiles ||
          !in_range(it)) {
        return;
      }
      if (lane < kBlockK / 16) {  // 16 ids of 8 bytes a 128-byte line
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(segment_ids(it) + lane * 16));
      }
    };
    prefetch_segments(0);
    // Whether tile it needs no mask, found while its S is on the tensor cores; starts moving
    // what the next tiles read (key segment ids, the bias rows) into L1.
    auto unmasked = [&](int it) {
      bool full = in_range(it);
      if (warp_segment != 0 && full && sched.key_chunk_segments != nullptr) {
        full = ChunksInSegment<kBlockK>(key_chunks(it), warp_segment);
      } else if (warp_segment != 0 && full) {
        int64_t ids[kBlockK / 32];
#pragma unroll
        for (int k = 0; k < kBlockK / 32; ++k) ids[k] = segment_ids(it)[lane + 32 * k];
        full = KeysInSegment<kBlockK>(ids, warp_segment);
      } else if (has_segments) {
        full = false;
      }
      prefetch_segments(it + 1);
      if (p.bias != nullptr && !bias_tiles) {
        PrefetchBias<kBlockK>(p, work.span, work.seq, work.head, rows, first_key(it), t);
      }
      return full;
    };
    auto softmax = [&](int it, bool full) {
      FenceRegisters(s);
      if (full && plain_logits) {
        ScaledSoftmaxProbabilities(s, scale_log2, m, l, alpha);
      } else {
        MaskLogits(s, p, work.span, work.seq, work.head, rows, first_key(it), full, t, !bias_tiles);
        if (bias_tiles) {  // the bias from this consumer's rows of the tile in shared memory
          BarrierWait(at.bias_full(consumer), static_cast<uint32_t>((used + it) & 1));
          AddBiasTile(s, at.bias() + consumer * Layout::kBiasBytes, (warp % 4) * 16, lane);
          __syncwarp();  // every lane has read its bias
          release(at.bias_empty(consumer));
        }
        SoftmaxProbabilities(s, m, l, alpha);
      }
    };
    // Releases K of tile it, and Q with the item's last tile (the producer loads the next
    // item's Q then).
    auto release_k = [&](int it) {
      release(at.k_empty(stage(it)));
      if (it == tiles.num_tiles - 1) release(at.q_empty());
    };

    if (tiles.num_tiles > 0) {
      BarrierWait(at.k_full(stage(0)), parity(0));
      take_turn();
      WgmmaFence();
      issue_s(stage(0));
      end_turn();
      const bool full = unmasked(0);
      WgmmaWait<0>();
      release_k(0);
      softmax(0, full);
      to_operand();
      for (int it = 1; it < tiles.num_tiles; ++it) {
        BarrierWait(at.k_full(stage(it)), parity(it));
        wait_v(it - 1);
        take_turn();
        WgmmaFence();
        issue_s(stage(it));
        issue_pv(stage(it - 1));
        end_turn();
        const bool full = unmasked(it);
        WgmmaWait<1>();  // S has landed: K is read
        release_k(it);
        softmax(it, full);
        WgmmaWait<0>();  // P V has landed: V is read
        release(at.v_empty(stage(it - 1)));
        FenceRegisters(o);
        FenceRegisters(pa);
        RescaleRows(o, alpha);
        to_operand();
      }
      const int last = tiles.num_tiles - 1;
      wait_v(last);
      take_turn();
      WgmmaFence();
      issue_pv(stage(last));
      end_turn();
      WgmmaWait<0>();
      release(at.v_empty(stage(last)));
      FenceRegisters(o);
      FenceRegisters(pa);
      used += tiles.num_tiles;
    }
    StoreRows<T, kBf16, kD>(p, work.span, work.seq, work.head, rows,
                            reinterpret_cast<const float(&)[kD / 8][4]>(o), m, l, t);
  }
  if constexpr (kPingPong) {
    if (consumer == 0) BarSync(3, 256);
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// How a launch of FlashWsKernel over `grid` (FlashGrid's: query tiles x Hq x sequences) finds
// its items. More items than SMs, of different costs (a causal mask, a window, varlen
// lengths): one block per SM, each drawing its next item from a counter (blocks that drew
// short items take more), and for varlen only the tiles with rows numbered (FlashWsSchedule).
// Dense calls with segment ids get the segment id of each chunk of keys. The counter, prefix
// and chunks live in *workspace, allocated on `stream` (the caller frees it there after the
// launch). Otherwise, or when that allocation fails: one block per item, or one per SM taking
// fixed shares (dense), or one per item of the grid handed out by the hardware (varlen), and
// consumers that read the key segment ids themselves.
inline cudaError_t PlanWsSchedule(const FlashDeviceArgs& args, const dim3& grid, int block_q,
                                  int sms, cudaStream_t stream, FlashWsSchedule* sched,
                                  unsigned* blocks, void** workspace) {
  const int64_t items = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  const bool varlen = args.cu_seqlens_q != nullptr;
  // Dense without a causal mask or a window, every item costs the same: fixed shares.
  const bool uneven = varlen || args.causal || args.window_left >= 0 || args.window_right >= 0;
  const bool counter_wanted = items > sms && uneven;
  const size_t chunk_count =
      args.kv_segment_ids != nullptr && !varlen
          ? static_cast<size_t>(args.num_sequences * FlashKeyChunks(args.seq_len_k))
          : 0;
  *blocks = static_cast<unsigned>(std::min<int64_t>(items, sms));
  if (!counter_wanted && chunk_count == 0) return cudaSuccess;
  const size_t prefix_bytes =
      counter_wanted && varlen ? 8 * static_cast<size_t>(args.num_sequences + 1) : 0;
  if (cudaMallocAsync(workspace, 8 + prefix_bytes + 8 * chunk_count, stream) != cudaSuccess) {
    *workspace = nullptr;
    (void)cudaGetLastError();  // a failed allocation only costs the balance
    if (counter_wanted && varlen && items <= INT32_MAX) *blocks = static_cast<unsigned>(items);
    return cudaSuccess;
  }
  auto* counter = static_cast<unsigned long long*>(*workspace);
  int64_t* prefix = prefix_bytes > 0 ? reinterpret_cast<int64_t*>(counter + 1) : nullptr;
  int64_t* chunks = reinterpret_cast<int64_t*>(counter + 1) + prefix_bytes / 8;
  cudaError_t error = cudaSuccess;
  if (counter_wanted) {
    sched->next = counter;
    sched->tile_prefix = prefix;
    error = LaunchFlashWsSchedule(args, block_q, counter, prefix, stream);
  }
  if (error == cudaSuccess && chunk_count > 0) {
    sched->key_chunk_segments = chunks;
    error = LaunchFlashKeyChunkSegments(args, chunks, stream);
  }
  if (error != cudaSuccess) {
    (void)cudaFreeAsync(*workspace, stream);
    *workspace = nullptr;
  }
  return error;
}

}  // namespace kernelserve::cuda::flash

namespace kernelserve::cuda {

// kPingPong: the two consumer warpgroups take turns at the tensor cores.
template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages,
          bool kPingPong>
cudaError_t LaunchFlashAttentionWsImpl(const FlashDeviceArgs& args, cudaStream_t stream) {
  cudaError_t error = flash::CheckFlashArgs(args);
  if (error != cudaSuccess) return error;
  dim3 grid;
  error = flash::FlashGrid(args, kBlockQ, grid);
  if (error != cudaSuccess || grid.x == 0) return error;
  FlashTensorMaps maps;
  error = EncodeFlashTensorMaps(args, kHeadDim, std::is_same_v<T, __nv_bfloat16>, kBlockQ, kBlockK,
                                &maps);
  if (error != cudaSuccess) {
    // Tensors TMA cannot read (unaligned, no keys at all) or an old driver: the wgmma kernel
    // computes the same rows.
    constexpr int kFallbackQ = kHeadDim > 128 ? 64 : 128;
    constexpr int kFallbackK = kHeadDim > 128 ? 64 : 128;
    return LaunchFlashAttentionWgmma<T, kHeadDim, kFallbackQ, kFallbackK, kFallbackQ / 16, 3>(
        args, stream);
  }
  int device = 0;
  int sms = 0;
  int shared_optin = 0;
  error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (error != cudaSuccess) return error;
  auto* kernel = &flash::FlashWsKernel<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages, kPingPong>;
  size_t shared = FlashWsSharedBytes(kHeadDim, kBlockQ, kBlockK, kStages);
  // The bias by tiles in shared memory where TMA can read it and the tiles fit; otherwise the
  // consumers read it from global memory.
  CUtensorMap bias_map{};
  bool bias_tiles = false;
  if (args.bias != nullptr &&
      shared + FlashWsBiasBytes(kBlockQ, kBlockK) <= static_cast<size_t>(shared_optin) &&
      EncodeFlashBiasMap(args, 64, &bias_map) == cudaSuccess) {
    bias_tiles = true;
    shared += FlashWsBiasBytes(kBlockQ, kBlockK);
  }
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (error != cudaSuccess) return error;
  FlashWsSchedule sched;
  unsigned blocks = 0;
  void* workspace = nullptr;
  error = flash::PlanWsSchedule(args, grid, kBlockQ, sms, stream, &sched, &blocks, &workspace);
  if (error != cudaSuccess) return error;
  kernel<<<blocks, kWarps * 32, shared, stream>>>(args, sched, static_cast<int>(grid.x), maps.q,
                                                  maps.k, maps.v, bias_map, bias_tiles);
  error = cudaGetLastError();
  if (workspace != nullptr) {
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    if (error == cudaSuccess) error = freed;
  }
  return error;
}

template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWs(const FlashDeviceArgs& args, cudaStream_t stream) {
  return LaunchFlashAttentionWsImpl<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages, false>(args,
                                                                                           stream);
}

template <typename T, int kHeadDim, int kBlockQ, int kBlockK, int kWarps, int kStages>
cudaError_t LaunchFlashAttentionWsPp(const FlashDeviceArgs& args, cudaStream_t stream) {
  return LaunchFlashAttentionWsImpl<T, kHeadDim, kBlockQ, kBlockK, kWarps, kStages, true>(args,
                                                                                          stream);
}

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_ATTENTION_WS_CUH_
