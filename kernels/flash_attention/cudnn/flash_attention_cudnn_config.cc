#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve::cudnn {
namespace {

// cuDNN's tensor descriptors take 32-bit element counts per tensor in its SDPA kernels.
constexpr int64_t kMaxElements = int64_t{1} << 31;

}  // namespace

const ConfigSchema& CudnnConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField(kCudnnPlanField, 0, kMaxCudnnPlanIndex, "0: cuDNN's first choice",
                     "cuDNN's execution plan (in its heuristics' order)",
                     /*replaces=*/"algorithm"),
  }};
  return *kSchema;
}

bool IsCudnnConfig(const KernelConfig& config) { return config.platform == kCudnnPlatform; }

KernelConfig CudnnFlashConfig(int plan_index) {
  KernelConfig config;
  config.platform = std::string(kCudnnPlatform);
  config.named[kCudnnPlanField] = plan_index;
  return config;
}

absl::StatusOr<int> CudnnFlashPlanIndex(const KernelConfig& config) {
  if (!IsCudnnConfig(config)) {
    return absl::InvalidArgumentError(absl::StrCat("flash attention (cudnn): config platform '",
                                                   config.platform, "' is not 'cudnn'"));
  }
  KS_RETURN_IF_ERROR(CudnnConfigSchema().Check(config, "flash attention on cudnn"));
  return static_cast<int>(config.Named(kCudnnPlanField));
}

absl::Status CheckCudnnFlashRules(const FlashAttentionProblem& p) {
  auto refuse = [](std::string_view what) {
    return absl::UnimplementedError(
        absl::StrCat("flash attention (cudnn): ", Sv(what), " is not run through cuDNN"));
  };
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return refuse(absl::StrCat("dtype ", Sv(DTypeName(p.dtype)), " (f16 and bf16 are)"));
  }
  if (p.head_dim % 8 != 0 || p.head_dim > 256) {
    return refuse(absl::StrCat("head dim ", p.head_dim, " (multiples of 8 up to 256 are)"));
  }
  if (p.has_segment_ids) return refuse("segment ids");
  if (p.logits_soft_cap != 0.0) return refuse("a logits soft cap");
  if (p.varlen) return refuse("varlen (cu_seqlens)");
  const int64_t q_elements = p.total_q * p.num_heads_q * p.head_dim;
  const int64_t kv_elements = p.total_k * p.num_heads_kv * p.head_dim;
  const int64_t bias_elements =
      p.has_bias ? p.bias_batch * p.bias_heads * p.seq_len_q * p.seq_len_k : 0;
  if (q_elements >= kMaxElements || kv_elements >= kMaxElements || bias_elements >= kMaxElements) {
    return refuse("a tensor of 2^31 elements or more");
  }
  return absl::OkStatus();
}

bool PreferCudnn(const FlashAttentionProblem& problem, const DeviceInfo& device) {
  return device.fingerprint.cc_major == 9 && !problem.has_bias;
}

bool PreferCudnnBackward(const FlashAttentionProblem& /*forward*/, const DeviceInfo& device) {
  return device.fingerprint.cc_major == 9;
}

}  // namespace kernelserve::cudnn
