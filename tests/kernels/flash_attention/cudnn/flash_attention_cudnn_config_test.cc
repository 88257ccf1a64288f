// The cudnn platform's plain C++ part: what a cudnn config is, which options are not sent to
// cuDNN, the measured rule between the platforms. None of these needs a GPU.
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve::cudnn {
namespace {

using ::testing::HasSubstr;

FlashAttentionProblem Dense(DType dtype, int64_t d) {
  FlashAttentionProblem p;
  p.dtype = dtype;
  p.num_sequences = 2;
  p.seq_len_q = 100;
  p.seq_len_k = 130;
  p.total_q = 200;
  p.total_k = 260;
  p.num_heads_q = 8;
  p.num_heads_kv = 2;
  p.head_dim = d;
  return p;
}

TEST(FlashAttentionCudnnConfigTest, PlanConfigsRoundTrip) {
  for (int i : {0, 1, 3, 17}) {
    const KernelConfig config = CudnnFlashConfig(i);
    EXPECT_TRUE(IsCudnnConfig(config));
    EXPECT_EQ(config.platform, "cudnn");
    EXPECT_EQ(config.algorithm, "");
    EXPECT_EQ(config.Named("plan"), i);
    absl::StatusOr<int> index = CudnnFlashPlanIndex(config);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(*index, i);
  }
  KernelConfig with_priority = CudnnFlashConfig(2);
  with_priority.priority = 5;  // a tie-break only
  EXPECT_EQ(*CudnnFlashPlanIndex(with_priority), 2);
}

TEST(FlashAttentionCudnnConfigTest, OtherConfigsAreInvalidArgumentNamingWhatIsWrong) {
  KernelConfig cuda;
  cuda.platform = "cuda";
  cuda.block_q = 64;
  EXPECT_FALSE(IsCudnnConfig(cuda));
  absl::Status status = CudnnFlashPlanIndex(cuda).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("platform 'cuda'"));

  KernelConfig tiles = CudnnFlashConfig(0);
  tiles.block_k = 64;
  status = CudnnFlashPlanIndex(tiles).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("block_k=64"));

  for (int64_t plan : {int64_t{-1}, int64_t{kMaxCudnnPlanIndex} + 1, int64_t{1} << 40}) {
    KernelConfig bad = CudnnFlashConfig(0);
    bad.named["plan"] = plan;
    status = CudnnFlashPlanIndex(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << plan;
    EXPECT_EQ(status.message(), absl::StrCat("config plan=", plan,
                                             " is out of range for flash attention on cudnn: "
                                             "expected 0..1023"));
  }
  // The plan as an algorithm name ("plan3", before config schema 2): refused, naming the field.
  KernelConfig old;
  old.platform = "cudnn";
  old.algorithm = "plan3";
  status = CudnnFlashPlanIndex(old).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config algorithm='plan3': algorithm is not a field of flash attention on cudnn; the "
            "field for cuDNN's execution plan (in its heuristics' order) is 'plan' (0..1023)");
  KernelConfig threads = CudnnFlashConfig(0);
  threads.named["threads"] = 2;
  EXPECT_THAT(CudnnFlashPlanIndex(threads).status().message(),
              HasSubstr("config 'threads'=2: not a field of flash attention on cudnn (its "
                        "fields: plan)"));
  EXPECT_EQ(CudnnConfigSchema().FieldNames(), "plan");
}

TEST(FlashAttentionCudnnConfigTest, RulesPassWhatCudnnIsAskedToRun) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t d : {8, 32, 64, 80, 96, 128, 160, 192, 256}) {
      FlashAttentionProblem p = Dense(dtype, d);
      EXPECT_TRUE(CheckCudnnFlashRules(p).ok()) << d;
      p.causal = true;
      p.return_lse = true;
      p.window_left = 16;
      p.has_bias = true;
      p.bias_batch = 1;
      p.bias_heads = 8;
      p.softmax_scale = 0.3;
      EXPECT_TRUE(CheckCudnnFlashRules(p).ok()) << d;  // the graph's own check decides more
    }
  }
}

TEST(FlashAttentionCudnnConfigTest, RulesRefuseWhatIsNotSentToCudnnNamingIt) {
  struct Case {
    const char* what;
    FlashAttentionProblem problem;
  };
  std::vector<Case> cases;
  cases.push_back({"dtype f32", Dense(DType::kF32, 64)});
  cases.push_back({"head dim 36", Dense(DType::kBF16, 36)});
  cases.push_back({"head dim 264", Dense(DType::kBF16, 264)});
  FlashAttentionProblem segments = Dense(DType::kF16, 64);
  segments.has_segment_ids = true;
  cases.push_back({"segment ids", segments});
  FlashAttentionProblem cap = Dense(DType::kF16, 64);
  cap.logits_soft_cap = 30.0;
  cases.push_back({"soft cap", cap});
  FlashAttentionProblem varlen = Dense(DType::kF16, 64);
  varlen.varlen = true;
  cases.push_back({"varlen", varlen});
  FlashAttentionProblem huge = Dense(DType::kF16, 128);
  huge.total_q = int64_t{1} << 22;
  huge.num_heads_q = 64;
  cases.push_back({"2^31 elements", huge});
  for (const Case& c : cases) {
    const absl::Status status = CheckCudnnFlashRules(c.problem);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << c.what;
    EXPECT_THAT(status.message(), HasSubstr(c.what));
  }
}

TEST(FlashAttentionCudnnConfigTest, MeasuredRulePrefersCudnnOnHopperOnly) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  const FlashAttentionProblem p = Dense(DType::kBF16, 128);
  device.fingerprint.cc_major = 9;
  EXPECT_TRUE(PreferCudnn(p, device));
  device.fingerprint.cc_major = 8;
  EXPECT_FALSE(PreferCudnn(p, device));
  device.fingerprint.cc_major = 0;  // unknown
  EXPECT_FALSE(PreferCudnn(p, device));
}

TEST(FlashAttentionCudnnConfigTest, MeasuredRuleKeepsTheOwnKernelForABiasForwardOnly) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.fingerprint.cc_major = 9;
  FlashAttentionProblem p = Dense(DType::kBF16, 128);
  p.has_bias = true;
  p.bias_batch = 1;
  p.bias_heads = 1;
  EXPECT_FALSE(PreferCudnn(p, device));
  EXPECT_TRUE(PreferCudnnBackward(p, device));
  p.has_bias = false;
  EXPECT_TRUE(PreferCudnnBackward(p, device));
  device.fingerprint.cc_major = 8;
  EXPECT_FALSE(PreferCudnnBackward(p, device));
}

}  // namespace
}  // namespace kernelserve::cudnn
