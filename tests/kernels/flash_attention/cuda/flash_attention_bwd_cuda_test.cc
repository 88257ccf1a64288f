// flash_attention_bwd's own CUDA kernels against the float64 CPU reference
// (flash_attention_bwd_test_util.h): every compiled config that fits the device, on every option
// of the contract (dbias too), with poisoned outputs and the same bits twice (unless a case says
// deterministic=false). Skips without a GPU.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/flash_attention/cuda/flash_attention_bwd_config.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "tests/kernels/flash_attention/cuda/flash_attention_bwd_test_util.h"

namespace kernelserve {
namespace {

class FlashAttentionBwdCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) GTEST_SKIP() << "no CUDA device visible";
    kernel_ = MakeFlashAttentionBwd();
  }

  // Every own config of the head dim that fits the device.
  std::vector<KernelConfig> OwnConfigs(int64_t d) const {
    std::vector<KernelConfig> configs;
    for (const KernelConfig& config : cuda::FlashAttentionBwdCompiledConfigs(d)) {
      if (cuda::FlashBwdConfigFits(config, d, devices_[0])) configs.push_back(config);
    }
    return configs;
  }

  void ExpectEveryConfig(const std::vector<BwdCase>& cases, uint64_t seed) {
    for (const BwdCase& c : cases) {
      SCOPED_TRACE(c.label);
      const std::vector<KernelConfig> configs = OwnConfigs(c.d);
      ASSERT_FALSE(configs.empty()) << c.label;
      EXPECT_TRUE(CheckBwdOnGpu(*kernel_, *kernel_->impl(Platform::kCuda), devices_[0], c,
                                seed += 10, configs))
          << c.label << ": the own kernels must run it";
    }
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

TEST_F(FlashAttentionBwdCudaTest, DenseCausalAndOddLengths) {
  std::vector<BwdCase> cases = DtypeHeadDimCases();
  BwdCase odd;
  odd.sq = 96;
  odd.sk = 173;
  odd.params = {{"causal", true}, {"softmax_scale", 0.07}};
  odd.label = "bf16 Sq=96 Sk=173 causal scale";
  cases.push_back(odd);
  BwdCase more_queries;  // causal with Sq > Sk: the first rows see no key
  more_queries.sq = 150;
  more_queries.sk = 70;
  more_queries.d = 128;
  more_queries.params = {{"causal", true}};
  more_queries.label = "bf16 Sq=150 Sk=70 causal D=128";
  cases.push_back(more_queries);
  ExpectEveryConfig(cases, 100);
}

TEST_F(FlashAttentionBwdCudaTest, GroupsWindowsCapAndBias) {
  std::vector<BwdCase> cases;
  BwdCase gqa;
  gqa.hkv = 2;
  gqa.d = 128;
  gqa.params = {{"causal", true}};
  gqa.label = "bf16 GQA 8:2 causal D=128";
  cases.push_back(gqa);
  BwdCase mqa;
  mqa.hq = 4;
  mqa.hkv = 1;
  mqa.dtype = DType::kF16;
  mqa.label = "f16 MQA 4:1";
  cases.push_back(mqa);
  BwdCase window;
  window.sk = 200;
  window.params = {{"window_left", int64_t{40}}, {"window_right", int64_t{7}}};
  window.label = "bf16 window 40/7 Sk=200";
  cases.push_back(window);
  BwdCase cap;
  cap.params = {{"causal", true}, {"logits_soft_cap", 2.5}};
  cap.label = "bf16 soft cap 2.5 causal";
  cases.push_back(cap);
  BwdCase bias;
  bias.bias = {1, 8, 128, 128};
  bias.params = {{"logits_soft_cap", 4.0}};
  bias.label = "bf16 bias [1,8,..] and soft cap";
  cases.push_back(bias);
  BwdCase batch_bias;
  batch_bias.d = 128;
  batch_bias.bias = {2, 1, 128, 128};
  batch_bias.params = {{"causal", true}};
  batch_bias.label = "bf16 bias [2,1,..] causal D=128";
  cases.push_back(batch_bias);
  BwdCase masked = bias;
  masked.params = {};
  masked.masked_row = true;
  masked.label = "bf16 bias with a row that sees no key";
  cases.push_back(masked);
  ExpectEveryConfig(cases, 300);
}

// dbias (the dbias kernel after either launcher): summed over the sequences, the heads or both,
// or none; with the soft cap (dbias is dS before the cap's derivative), masks, GQA and a row
// that sees no key.
TEST_F(FlashAttentionBwdCudaTest, Dbias) {
  std::vector<BwdCase> cases;
  BwdCase heads;
  heads.sq = 96;
  heads.sk = 173;
  heads.bias = {1, 8, 96, 173};
  heads.params = {{"causal", true}, {"logits_soft_cap", 4.0}, {"return_dbias", true}};
  heads.label = "bf16 dbias [1,8,..] Sq=96 Sk=173 causal soft cap";
  cases.push_back(heads);
  BwdCase batches;
  batches.d = 128;
  batches.hkv = 2;
  batches.bias = {2, 1, 128, 128};
  batches.params = {{"causal", true}, {"return_dbias", true}};
  batches.label = "bf16 dbias [2,1,..] causal GQA 8:2 D=128";
  cases.push_back(batches);
  BwdCase full;
  full.dtype = DType::kF16;
  full.sk = 200;
  full.bias = {2, 8, 128, 200};
  full.masked_row = true;
  full.params = {
      {"window_left", int64_t{40}}, {"window_right", int64_t{7}}, {"return_dbias", true}};
  full.label = "f16 dbias [2,8,..] window 40/7 Sk=200, a row that sees no key";
  cases.push_back(full);
  BwdCase both;
  both.dtype = DType::kF16;
  both.d = 128;
  both.bias = {1, 1, 128, 128};
  both.segments = true;
  both.params = {{"return_dbias", true}, {"deterministic", false}};
  both.label = "f16 dbias [1,1,..] segment ids D=128, not deterministic";
  cases.push_back(both);
  ExpectEveryConfig(cases, 900);
}

TEST_F(FlashAttentionBwdCudaTest, SegmentsAndVarlen) {
  std::vector<BwdCase> cases;
  BwdCase segments;
  segments.segments = true;
  segments.params = {{"causal", true}};
  segments.label = "bf16 segment ids causal";
  cases.push_back(segments);
  BwdCase varlen;
  varlen.q_lengths = {37, 0, 128, 200};
  varlen.k_lengths = {50, 10, 128, 77};
  varlen.label = "bf16 varlen (an empty query sequence, 3 rows past the last)";
  cases.push_back(varlen);
  BwdCase varlen_causal = varlen;
  varlen_causal.d = 128;
  varlen_causal.hkv = 4;
  varlen_causal.params = {{"causal", true}};
  varlen_causal.label = "bf16 varlen causal GQA 8:4 D=128";
  cases.push_back(varlen_causal);
  ExpectEveryConfig(cases, 500);
}

// Many key tiles adding to each query tile (the wgmma kernel's ordered dQ sums), and a call
// that lets them add in any order.
TEST_F(FlashAttentionBwdCudaTest, LongSequencesAndAnyOrder) {
  std::vector<BwdCase> cases;
  BwdCase causal;
  causal.b = 1;
  causal.sq = causal.sk = 600;
  causal.hq = 4;
  causal.hkv = 2;
  causal.d = 128;
  causal.params = {{"causal", true}};
  causal.label = "bf16 Sq=Sk=600 causal GQA 4:2 D=128";
  cases.push_back(causal);
  BwdCase window = causal;
  window.sq = 300;
  window.sk = 700;
  window.d = 64;
  window.params = {{"window_left", int64_t{250}}, {"window_right", int64_t{90}}};
  window.label = "bf16 Sq=300 Sk=700 window 250/90 D=64";
  cases.push_back(window);
  BwdCase any_order = causal;
  any_order.dtype = DType::kF16;
  any_order.params = {{"causal", true}, {"deterministic", false}};
  any_order.label = "f16 Sq=Sk=600 causal GQA 4:2 D=128, not deterministic";
  cases.push_back(any_order);
  // Six query heads' blocks add into one kv head's dK and dV; the last key tile's second half
  // has no key (Sk = 173 = 128 + 45).
  BwdCase mqa = causal;
  mqa.b = 2;
  mqa.sq = 150;
  mqa.sk = 173;
  mqa.hq = 6;
  mqa.hkv = 1;
  mqa.d = 64;
  mqa.label = "bf16 Sq=150 Sk=173 causal MQA 6:1 D=64";
  cases.push_back(mqa);
  ExpectEveryConfig(cases, 700);
}

}  // namespace
}  // namespace kernelserve
