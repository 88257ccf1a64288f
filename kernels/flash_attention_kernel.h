// The flash attention forward kernel: validation, output specs, configs and the factory that
// returns it with its CPU implementation.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_KERNEL_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_KERNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve {

// A flash attention call as the implementations see it, read from validated inputs and
// attributes. A value type.
struct FlashAttentionProblem {
  DType dtype = DType::kF32;     // of q, k, v and out
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

// Checks the inputs and attributes of a flash attention call (see FlashAttentionKernel) and
// describes it. InvalidArgument naming the input or attribute and what was expected.
absl::StatusOr<FlashAttentionProblem> AnalyzeFlashAttention(const TensorSpecMap& inputs,
                                                            const Attributes& attrs);

// "flash_attention" v1, forward.
//   q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] -> out [B,Sq,Hq,D] (dtype of q), lse [B,Hq,Sq] f32
//   varlen: q [Tq,Hq,D] or [1,Tq,Hq,D], k and v [Tk,Hkv,D] or [1,Tk,Hkv,D], cu_seqlens_q and
//   cu_seqlens_k [N+1] -> out shaped as q, lse [Hq,Tq]
// logits = softmax_scale * q.k, soft-capped (cap * tanh(s / cap)), plus bias; query i sees key
// j per causal (j <= i + Sk - Sq), the window around that diagonal and equal segment ids > 0.
// Hq is a multiple of Hkv (GQA/MQA). Bias and segment ids need the dense form. A row that
// sees no key gives zeros and lse -inf.
// Thread safety: the const methods are thread-safe (see Kernel).
class FlashAttentionKernel : public Kernel {
 public:
  std::string name() const override { return "flash_attention"; }
  int version() const override { return 1; }

  std::vector<ArgDoc> input_docs() const override;
  std::vector<ArgDoc> output_docs() const override;
  std::vector<ArgDoc> attribute_docs() const override;

  absl::Status Validate(const TensorSpecMap& inputs, const Attributes& attrs) const override;
  // Checks that cu_seqlens_q / cu_seqlens_k start at 0, never decrease and end at most at Tq
  // / Tk.
  absl::Status ValidateData(const TensorMap& inputs, const Attributes& attrs) const override;
  TensorSpecMap OutputSpecs(const TensorSpecMap& inputs, const Attributes& attrs) const override;

  // CPU: see CpuFlashAttentionHeuristic. CUDA: CudaFlashAttentionHeuristic. Others: empty.
  KernelConfig HeuristicConfig(const TensorSpecMap& inputs, const Attributes& attrs,
                               const DeviceInfo& device) const override;
  // CPU: block_q in {16,32,64} x block_k in {32,64,128} x num_warps in {1, 2, hardware
  // threads}. CUDA: cuda::FlashAttentionCandidates (compiled configs that fit the device; none
  // for inputs the CUDA kernel does not handle). Other platforms: none.
  std::vector<KernelConfig> CandidateConfigs(const TensorSpecMap& inputs, const Attributes& attrs,
                                             const DeviceInfo& device) const override;
};

// The CPU heuristic, a pure function: block_q 16 when every sequence has at most 16 queries
// (decode-like calls waste no rows), else 32; block_k 64 for D <= 64, else 32 (a K and a V
// tile stay within 16 KiB); one thread below 2^22 multiply-adds, else every hardware thread.
KernelConfig CpuFlashAttentionHeuristic(const FlashAttentionProblem& problem,
                                        const DeviceInfo& device);
// The CUDA heuristic: cuda::FlashAttentionHeuristic (kernels/cuda/flash_attention_config.h).
KernelConfig CudaFlashAttentionHeuristic(const FlashAttentionProblem& problem,
                                         const DeviceInfo& device);

// A FlashAttentionKernel with its CPU implementation added.
std::unique_ptr<Kernel> MakeFlashAttentionKernel();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_KERNEL_H_
