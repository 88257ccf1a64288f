// flash_attention_bwd's cudnn platform (cuDNN's SDPA backward) against the float64 CPU
// reference (flash_attention_bwd_test_util.h): every plan, plain, causal, Sq != Sk, GQA, windows,
// scale, bias with and without dbias, and a row that sees no key, the same bits twice (the
// deterministic algorithm; and a call with deterministic=false, within the tolerance). What cuDNN
// refuses is Unimplemented (the cpu platform serves it). Skips without a GPU; without cuDNN it
// skips too, unless KERNELSERVE_EXPECT_CUDNN=1, where it fails.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "tests/kernels/flash_attention/cuda/flash_attention_bwd_test_util.h"

namespace kernelserve {
namespace {

class FlashAttentionBwdCudnnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) GTEST_SKIP() << "no CUDA device visible";
    kernel_ = MakeFlashAttentionBwd();
    if (kernel_->impl(Platform::kCudnn) == nullptr) {
      const char* expect = std::getenv("KERNELSERVE_EXPECT_CUDNN");
      if (expect != nullptr && std::strcmp(expect, "1") == 0) {
        FAIL() << "KERNELSERVE_EXPECT_CUDNN=1 but flash_attention_bwd has no cudnn platform";
      }
      GTEST_SKIP() << "cuDNN is not loadable here: flash_attention_bwd has no cudnn platform";
    }
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

TEST_F(FlashAttentionBwdCudnnTest, MatchesTheCpuReferenceOnEveryPlan) {
  std::vector<BwdCase> cases = DtypeHeadDimCases();
  BwdCase odd;
  odd.sq = 96;
  odd.sk = 160;
  odd.params = {{"causal", true}, {"softmax_scale", 0.07}};
  odd.label = "bf16 Sq=96 Sk=160 causal scale";
  cases.push_back(odd);
  BwdCase gqa;
  gqa.hkv = 2;
  gqa.d = 128;
  gqa.label = "bf16 GQA 8:2 D=128";
  cases.push_back(gqa);
  BwdCase window;
  window.params = {{"window_left", int64_t{32}}, {"window_right", int64_t{8}}};
  window.label = "bf16 window 32/8";
  cases.push_back(window);
  BwdCase bias;
  bias.bias = {1, 8, 128, 128};
  bias.label = "bf16 bias [1,8,..]";
  cases.push_back(bias);
  BwdCase dbias = bias;
  dbias.params = {{"return_dbias", true}};
  dbias.label = "bf16 bias [1,8,..] with dbias";
  cases.push_back(dbias);
  BwdCase batch_bias = dbias;
  batch_bias.bias = {2, 8, 128, 128};
  batch_bias.label = "bf16 bias [2,8,..] with dbias";
  cases.push_back(batch_bias);
  BwdCase fast = gqa;
  fast.params = {{"causal", true}, {"deterministic", false}};
  fast.label = "bf16 GQA 8:2 D=128 causal, not deterministic";
  cases.push_back(fast);
  BwdCase masked = bias;
  masked.masked_row = true;
  masked.label = "bf16 bias with a row that sees no key";
  cases.push_back(masked);
  int ran = 0;
  uint64_t seed = 900;
  for (const BwdCase& c : cases) {
    SCOPED_TRACE(c.label);
    ran += CheckBwdOnGpu(*kernel_, *kernel_->impl(Platform::kCudnn), devices_[0], c, seed += 10)
               ? 1
               : 0;
  }
  // The plain, causal, GQA and window cases are cuDNN's core: they must run.
  EXPECT_GE(ran, 12) << "cuDNN refused more than the bias variants";
}

}  // namespace
}  // namespace kernelserve
