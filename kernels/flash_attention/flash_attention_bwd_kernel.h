// The flash attention backward kernel (the VJP of flash_attention): its schema, the analysis
// of a call into a FlashAttentionBwdProblem, and the checks and output specs of the contract.
// Its platforms (cpu/) read the problem; flash_attention_bwd.h assembles the kernel with them.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_KERNEL_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_KERNEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "core/schema.h"
#include "kernels/flash_attention/flash_attention_kernel.h"

namespace kernelserve {

// A flash attention backward call as the platforms see it. A value type.
struct FlashAttentionBwdProblem : Problem {
  // The forward call whose VJP this is: dtype, shapes, forms, optional inputs and resolved
  // params (return_lse false).
  FlashAttentionProblem fwd;
  Shape k_shape;              // of k and v, hence of dk and dv
  bool return_dbias = false;  // REQUIRES fwd.has_bias
  // Same bits for the same inputs (param deterministic): asks cuDNN for its deterministic
  // algorithm and makes the own Hopper kernel add dQ in a fixed order; the cpu platform and
  // the mma.sync kernels always are.
  bool deterministic = true;
};

// The forward call a problem belongs to: itself, or the one a backward differentiates.
inline const FlashAttentionProblem& ForwardOf(const FlashAttentionProblem& p) { return p; }
inline const FlashAttentionProblem& ForwardOf(const FlashAttentionBwdProblem& p) { return p.fwd; }

// "flash_attention_bwd" v1, the vector-Jacobian product of "flash_attention".
//   q, k, v and every optional input (cu_seqlens_q/k, q/kv_segment_ids, bias) as the forward
//   takes them, with the same rules; out and dout (shape and dtype of q); lse (f32, the
//   forward's lse: [B,Hq,Sq] dense, [Hq,Tq] varlen) -> dq (shape and dtype of q), dk and dv
//   (shape and dtype of k), and with return_dbias dbias (shape of bias, f32).
// Params: the forward's (causal, softmax_scale, window_left, window_right, logits_soft_cap)
// but return_lse, plus return_dbias and deterministic (default true: the same inputs give the
// same bits; false lets cuDNN's plans and the own Hopper kernel sum in any order). The forward
// with return_lse=true, then this kernel on its out and lse, is the VJP of the forward.
//
// Per sequence, query head h (kv head h / (Hq / Hkv)), query row i and visible key j:
//   raw_ij = scale * q_i.k_j; t_ij = tanh(raw_ij / cap) with a cap, logits_ij = cap * t_ij +
//   bias_ij (raw_ij + bias_ij without one)
//   P_ij = exp(logits_ij - lse_i)              with the GIVEN lse (the forward's residual)
//   D_i = sum_x dout_ix * out_ix              with the GIVEN out
//   dV_j += P_ij dout_i;  dP_ij = dout_i.v_j;  dS_ij = P_ij (dP_ij - D_i)
//   dS_raw_ij = dS_ij (1 - t_ij^2) with a cap, dS_ij without
//   dQ_i += scale dS_raw_ij k_j;  dK_j += scale dS_raw_ij q_i;  dbias_ij += dS_ij
// dk and dv sum over the Hq / Hkv query heads of each kv head (GQA/MQA), dbias over the
// dims the bias broadcasts. A row that sees no key (lse -inf) contributes nothing: its dq is
// zero. Rows no sequence covers (varlen) get zero gradients.
const KernelSchema& FlashAttentionBwdSchema();

// Checks a call against the schema and the contract's rules (the forward's for q, k, v, the
// optional inputs and the params; out, dout and lse against q; return_dbias needs bias) and
// describes it. InvalidArgument naming the input or param and what was expected.
absl::StatusOr<FlashAttentionBwdProblem> AnalyzeFlashAttentionBwd(const TensorSpecMap& inputs,
                                                                  const Attributes& params);

// Thread safety: the const methods are thread-safe (see Kernel).
class FlashAttentionBwdKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return FlashAttentionBwdSchema(); }
  // Checks that cu_seqlens_q / cu_seqlens_k start at 0, never decrease and end at most at Tq
  // / Tk.
  absl::Status ValidateData(const Problem& problem, const TensorMap& inputs) const override;
  TensorSpecMap OutputSpecs(const Problem& problem) const override;
  // The default's random data, with cu_seqlens splitting q and k into sequences of near equal
  // lengths (segment ids 1), and out and lse the CPU forward's on q, k and v; past 2^30
  // multiply-adds, where that forward would take seconds, out stays random and lse is one
  // finite value above every logit instead (so that every P <= 1).
  absl::StatusOr<TensorMap> SynthesizeInputs(const Problem& problem, const TensorSpecMap& specs,
                                             uint64_t seed) const override;

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_FLASH_ATTENTION_BWD_KERNEL_H_
