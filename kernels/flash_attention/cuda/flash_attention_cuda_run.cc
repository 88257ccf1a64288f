#include "kernels/flash_attention/cuda/flash_attention_cuda_run.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/status_macros.h"

namespace kernelserve::cuda {
namespace {

std::vector<int64_t> IntsOrEmpty(const TensorMap& inputs, const std::string& name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? std::vector<int64_t>() : it->second.ToInts();
}

}  // namespace

absl::Status FlashInputsRun::UploadIndexInputs(const TensorMap& inputs) {
  covered_q_ = p_.num_sequences * p_.seq_len_q;
  if (p_.varlen) {
    const std::vector<int64_t> cu_q = inputs.at("cu_seqlens_q").ToInts();
    const std::vector<int64_t> cu_k = inputs.at("cu_seqlens_k").ToInts();
    KS_ASSIGN_OR_RETURN(cu_q_, Upload(cu_q.data(), cu_q.size() * sizeof(int64_t)));
    KS_ASSIGN_OR_RETURN(cu_k_, Upload(cu_k.data(), cu_k.size() * sizeof(int64_t)));
    args_.cu_seqlens_q = static_cast<const int64_t*>(cu_q_.get());
    args_.cu_seqlens_k = static_cast<const int64_t*>(cu_k_.get());
    for (size_t i = 0; i + 1 < cu_q.size(); ++i) {
      args_.max_seq_len_q = std::max(args_.max_seq_len_q, cu_q[i + 1] - cu_q[i]);
      max_seq_len_k_ = std::max(max_seq_len_k_, cu_k[i + 1] - cu_k[i]);
    }
    covered_q_ = cu_q.back();
  }
  if (p_.has_segment_ids) {
    const std::vector<int64_t> sq = IntsOrEmpty(inputs, "q_segment_ids");
    const std::vector<int64_t> sk = IntsOrEmpty(inputs, "kv_segment_ids");
    KS_ASSIGN_OR_RETURN(seg_q_, Upload(sq.data(), sq.size() * sizeof(int64_t)));
    KS_ASSIGN_OR_RETURN(seg_k_, Upload(sk.data(), sk.size() * sizeof(int64_t)));
    args_.q_segment_ids = static_cast<const int64_t*>(seg_q_.get());
    args_.kv_segment_ids = static_cast<const int64_t*>(seg_k_.get());
  }
  return absl::OkStatus();
}

absl::Status FlashInputsRun::UploadFlashInputs(const TensorMap& inputs) {
  KS_RETURN_IF_ERROR(InitEvents());
  const Tensor& q = inputs.at("q");
  KS_ASSIGN_OR_RETURN(q_, Upload(q.data(), q.nbytes()));
  KS_ASSIGN_OR_RETURN(k_, Upload(inputs.at("k").data(), inputs.at("k").nbytes()));
  KS_ASSIGN_OR_RETURN(v_, Upload(inputs.at("v").data(), inputs.at("v").nbytes()));
  args_.q = q_.get();
  args_.k = k_.get();
  args_.v = v_.get();
  args_.total_q = p_.total_q;
  args_.total_k = p_.total_k;
  args_.num_heads_q = p_.num_heads_q;
  args_.num_heads_kv = p_.num_heads_kv;
  args_.num_sequences = p_.num_sequences;
  args_.seq_len_q = p_.seq_len_q;
  args_.seq_len_k = p_.seq_len_k;
  args_.softmax_scale = static_cast<float>(p_.softmax_scale);
  args_.causal = p_.causal;
  args_.window_left = p_.window_left;
  args_.window_right = p_.window_right;
  args_.softcap = static_cast<float>(p_.logits_soft_cap);
  KS_RETURN_IF_ERROR(UploadIndexInputs(inputs));
  if (p_.has_bias) {
    const Tensor& bias = inputs.at("bias");
    KS_ASSIGN_OR_RETURN(bias_, Upload(bias.data(), bias.nbytes()));
    args_.bias = static_cast<const float*>(bias_.get());
    const int64_t plane = p_.seq_len_q * p_.seq_len_k;
    args_.bias_head_stride = p_.bias_heads == 1 ? 0 : plane;
    args_.bias_batch_stride = p_.bias_batch == 1 ? 0 : p_.bias_heads * plane;
  }
  return absl::OkStatus();
}

}  // namespace kernelserve::cuda
