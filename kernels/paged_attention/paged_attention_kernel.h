// The paged attention kernel: attention of a few new query tokens per sequence over a cache of
// keys and values kept in pages (a block table per sequence), optionally appending the new
// keys and values to the cache first. Its schema, the analysis of a call into a
// PagedAttentionProblem, and the checks and output specs of the contract. Its platforms (cpu/,
// cuda/) read the problem; paged_attention.h assembles the kernel with them.
#ifndef KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_KERNEL_H_
#define KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_KERNEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"

namespace kernelserve {

// A paged attention call as the platforms see it. A value type.
struct PagedAttentionProblem : Problem {
  DType dtype = DType::kF32;  // of q, out, and k, v when appending; the caches too unless fp8
  int64_t batch = 0;          // B
  int64_t seq_len_q = 0;      // Sq: new query tokens per sequence
  int64_t num_heads_q = 0;    // Hq
  int64_t num_heads_kv = 0;   // Hkv, dividing Hq
  int64_t head_dim = 0;       // D
  int64_t num_pages = 0;      // pages in each cache
  int64_t page_size = 0;      // tokens per page
  int64_t max_pages = 0;      // block_table's columns: pages per sequence at most
  bool append = false;        // k and v given: written into the cache first
  // fp8 caches (dtype is then kF16 or kBF16); scales absent = 1 for every head.
  DType cache_dtype = DType::kF32;  // of k_cache and v_cache: dtype, or kF8E4M3 / kF8E5M2
  bool has_k_scale = false;         // k_scale [Hkv] given
  bool has_v_scale = false;         // v_scale [Hkv] given
  // Attributes.
  bool causal = false;
  double softmax_scale = 0.0;    // resolved: 1/sqrt(D) when the attribute is 0 or absent
  int64_t window_left = -1;      // -1 = unlimited
  int64_t window_right = -1;     // -1 = unlimited
  double logits_soft_cap = 0.0;  // 0 = off
  bool return_lse = false;
};

// "paged_attention" v1.
//   q [B,Sq,Hq,D], k_cache and v_cache [P,page_size,Hkv,D], block_table [B,max_pages] i32,
//   cache_seqlens [B] i32 -> out [B,Sq,Hq,D] (dtype of q), lse [B,Hq,Sq] f32 on request.
// Sequence b's token t (t < L = cache_seqlens[b]) is slot t % page_size of page
// block_table[b, t / page_size]; entries past the pages a sequence uses are not read. The Sq
// queries are the sequence's last Sq tokens: query i sits at position L - Sq + i, and sees key
// t per causal (t <= L - Sq + i), the window around that position and nothing else. logits =
// softmax_scale * q.k, soft-capped (cap * tanh(s / cap)). Hq is a multiple of Hkv (GQA/MQA). A
// query that sees no key (L = 0) gives zeros and lse -inf.
// Append (k and v [B,Sq,Hkv,D] given): before attending, the new keys and values are written
// at positions L - Sq .. L - 1 of each sequence with L > 0 (L >= Sq required there); k_cache
// and v_cache are updated in place (InputSchema::updated): resident caches keep the write.
// fp8 caches: k_cache and v_cache may both be f8_e4m3 or both f8_e5m2 when q is f16 or bf16.
// Optional k_scale, v_scale [Hkv] f32 (fp8 caches only, each may come alone; absent = 1):
// cache element (.., h, d) stands for float(cache) * scale[h]. An append stores
// fp8(float(x) / scale[h]), the division in float, then core/dtype's saturating RNE conversion.
const KernelSchema& PagedAttentionSchema();

// Checks a call against the schema and the contract's own rules and describes it.
// InvalidArgument naming the input or param.
absl::StatusOr<PagedAttentionProblem> AnalyzePagedAttention(const TensorSpecMap& inputs,
                                                            const Attributes& params);

// Thread safety: the const methods are thread-safe (see Kernel).
class PagedAttentionKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return PagedAttentionSchema(); }
  // Checks cache_seqlens (0 <= L <= max_pages * page_size; L >= Sq where appending), the
  // block table entries each sequence uses (0 <= page < P), that no two sequences append
  // into the same slot of a page, and that k_scale and v_scale are finite and > 0.
  absl::Status ValidateData(const Problem& problem, const TensorMap& inputs) const override;
  TensorSpecMap OutputSpecs(const Problem& problem) const override;
  // Random q, caches and new k, v (fp8 caches: finite values in [-1, 1]), scales uniform in
  // [0.5, 2); each sequence given an equal share of the pages, dealt out shuffled, and full
  // length (empty where its share cannot hold the Sq new tokens).
  absl::StatusOr<TensorMap> SynthesizeInputs(const Problem& problem, const TensorSpecMap& specs,
                                             uint64_t seed) const override;

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_PAGED_ATTENTION_PAGED_ATTENTION_KERNEL_H_
