// The work items of FlashAttentionBwdCpu (flash_attention_bwd.h), internal to it: one pass
// per output (dq; dk and dv; dbias), each output element summed by one item in a fixed order.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_PASSES_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_PASSES_H_

#include <cstdint>
#include <vector>

#include "kernels/flash_attention/cpu/flash_attention_bwd.h"

namespace kernelserve::cpu::attention_bwd {

// Where one sequence lives in q and k.
struct Span {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  int64_t k_begin = 0;
  int64_t k_len = 0;
};

// A work item: rows [start, start + block) of one sequence and one head (of q for dq, of k
// for dk and dv).
struct Item {
  int64_t seq = 0;
  int64_t start = 0;
  int64_t head = 0;
};

// A query row as the pair terms read it.
struct QueryRow {
  const double* q = nullptr;     // [D]
  const double* dout = nullptr;  // [D]
  double delta = 0.0;            // D_i = dout . out
  double lse = 0.0;
  int64_t lo = 0;  // visible keys [lo, hi]; none when hi < lo
  int64_t hi = -1;
  int64_t segment = 0;          // the row's segment id (segments only)
  const float* bias = nullptr;  // bias[b, h, i, :], or null
};

// Per-worker buffers.
struct Scratch {
  std::vector<float> f;        // conversions: [max(D, dbias row)]
  std::vector<double> out;     // [D]
  std::vector<double> q;       // [block_q, D]
  std::vector<double> dout;    // [block_q, D]
  std::vector<QueryRow> rows;  // [block_q]
  std::vector<double> k;       // [block_k, D]
  std::vector<double> v;       // [block_k, D]
  std::vector<double> acc;     // [max(block_q, block_k), D] dq or dk; [Sk] a dbias row
  std::vector<double> acc_v;   // [block_k, D] dv
};

// Everything a work item needs.
struct Plan {
  const FlashAttentionBwdArgs* args = nullptr;
  int64_t block_q = 0;
  int64_t block_k = 0;
  int64_t group = 1;  // Hq / Hkv
  double scale = 1.0;
  double softcap = 0.0;
};

// Where sequence `seq` lives in q and k. REQUIRES: the offsets passed CheckOffsets.
Span SpanOf(const FlashAttentionArgs& a, int64_t seq);

// Sizes `w`'s buffers for `plan`; `dbias_len` is the length of a dbias row (Sk), 0 without
// dbias.
void ResizeScratch(const Plan& plan, int64_t dbias_len, Scratch& w);

// dq of query rows [start, start + block_q) of one sequence and head: sums over keys j.
void RunDq(const Plan& plan, const Item& item, Scratch& w);

// dk and dv of key rows [start, start + block_k) of one sequence and kv head: sums over the
// group's query heads, then query rows.
void RunDkDv(const Plan& plan, const Item& item, Scratch& w);

// Row `index` of dbias ([dbias_batch, dbias_heads, Sq] rows of Sk): sums over the sequences,
// then the heads, it broadcasts to.
void RunDbiasRow(const Plan& plan, int64_t index, Scratch& w);

}  // namespace kernelserve::cpu::attention_bwd

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CPU_FLASH_ATTENTION_BWD_PASSES_H_
