// The flash attention forward kernel: its schema, the analysis of a call into a
// FlashAttentionProblem, and the checks and output specs of the contract. Its platforms (cpu/,
// cuda/) read the problem; flash_attention.h assembles the kernel with them.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_KERNEL_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_KERNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"

namespace kernelserve {

// A flash attention call as the platforms see it. A value type.
struct FlashAttentionProblem : Problem {
  DType dtype = DType::kF32;     // of q, k, v and out
  Shape q_shape;                 // and of out
  bool varlen = false;           // cu_seqlens_q / cu_seqlens_k given
  int64_t num_sequences = 0;     // B (dense) or N (varlen)
  int64_t seq_len_q = 0;         // Sq (dense); 0 in varlen
  int64_t seq_len_k = 0;         // Sk (dense); 0 in varlen
  int64_t total_q = 0;           // B*Sq (dense) or Tq (varlen)
  int64_t total_k = 0;           // B*Sk (dense) or Tk (varlen)
  int64_t num_heads_q = 0;       // Hq
  int64_t num_heads_kv = 0;      // Hkv
  int64_t head_dim = 0;          // D
  bool has_bias = false;         // bias [B or 1, Hq or 1, Sq, Sk]
  int64_t bias_batch = 0;        // bias dim 0 (1 = broadcast over the batch)
  int64_t bias_heads = 0;        // bias dim 1 (1 = broadcast over the heads)
  bool has_segment_ids = false;  // q_segment_ids and kv_segment_ids
  // Attributes.
  bool causal = false;
  double softmax_scale = 0.0;    // resolved: 1/sqrt(D) when the attribute is 0 or absent
  int64_t window_left = -1;      // -1 = unlimited
  int64_t window_right = -1;     // -1 = unlimited
  double logits_soft_cap = 0.0;  // 0 = off
  bool return_lse = false;
};

// lse's shape for `p`: [B,Hq,Sq], or [Hq,Tq] in varlen.
Shape FlashLseShape(const FlashAttentionProblem& p);
// bias's (and dbias's) shape for `p`: [bias_batch, bias_heads, Sq, Sk].
Shape FlashBiasShape(const FlashAttentionProblem& p);

// "flash_attention" v1, forward.
//   q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] -> out [B,Sq,Hq,D] (dtype of q), lse [B,Hq,Sq] f32
//   varlen: q [Tq,Hq,D] or [1,Tq,Hq,D], k and v [Tk,Hkv,D] or [1,Tk,Hkv,D], cu_seqlens_q and
//   cu_seqlens_k [N+1] -> out shaped as q, lse [Hq,Tq]
// logits = softmax_scale * q.k, soft-capped (cap * tanh(s / cap)), plus bias; query i sees key
// j per causal (j <= i + Sk - Sq), the window around that diagonal and equal segment ids > 0.
// Hq is a multiple of Hkv (GQA/MQA). Bias and segment ids need the dense form. A row that
// sees no key gives zeros and lse -inf.
const KernelSchema& FlashAttentionSchema();

// Checks a call against the schema and the contract's own rules (shapes that agree, inputs
// that go together) and describes it. InvalidArgument naming the input or param.
absl::StatusOr<FlashAttentionProblem> AnalyzeFlashAttention(const TensorSpecMap& inputs,
                                                            const Attributes& params);

// Thread safety: the const methods are thread-safe (see Kernel).
class FlashAttentionKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return FlashAttentionSchema(); }
  // Checks that cu_seqlens_q / cu_seqlens_k start at 0, never decrease and end at most at Tq
  // / Tk.
  absl::Status ValidateData(const Problem& problem, const TensorMap& inputs) const override;
  TensorSpecMap OutputSpecs(const Problem& problem) const override;
  // The default's random data, with cu_seqlens splitting q and k into sequences of near equal
  // lengths (segment ids are 1: one segment per row).
  absl::StatusOr<TensorMap> SynthesizeInputs(const Problem& problem, const TensorSpecMap& specs,
                                             uint64_t seed) const override;

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_KERNEL_H_
