#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::cudnn {
namespace {

constexpr std::string_view kPlanPrefix = "plan";
// cuDNN's tensor descriptors take 32-bit element counts per tensor in its SDPA kernels.
constexpr int64_t kMaxElements = int64_t{1} << 31;

}  // namespace

bool IsCudnnConfig(const KernelConfig& config) { return config.platform == kCudnnPlatform; }

KernelConfig CudnnFlashConfig(int plan_index) {
  KernelConfig config;
  config.platform = std::string(kCudnnPlatform);
  config.algorithm = absl::StrCat(Sv(kPlanPrefix), plan_index);
  return config;
}

absl::StatusOr<int> CudnnFlashPlanIndex(const KernelConfig& config) {
  if (!IsCudnnConfig(config)) {
    return absl::InvalidArgumentError(absl::StrCat("flash attention (cudnn): config platform '",
                                                   config.platform, "' is not 'cudnn'"));
  }
  KernelConfig bare = config;
  bare.platform.clear();
  bare.algorithm.clear();
  bare.priority = 0;
  if (!(bare == KernelConfig())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention (cudnn): a cudnn config sets only platform and algorithm, got {",
        config.DebugString(), "}"));
  }
  int index = -1;
  const std::string_view algorithm = config.algorithm;
  if (algorithm.substr(0, kPlanPrefix.size()) != kPlanPrefix ||
      !absl::SimpleAtoi(Sv(algorithm.substr(kPlanPrefix.size())), &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention (cudnn): algorithm '", config.algorithm,
        "' is not a plan; expected plan0, plan1, ... (cuDNN's plans in its heuristics' order)"));
  }
  return index;
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

bool PreferCudnn(const FlashAttentionProblem& /*problem*/, const DeviceInfo& device) {
  return device.fingerprint.cc_major == 9;
}

}  // namespace kernelserve::cudnn
