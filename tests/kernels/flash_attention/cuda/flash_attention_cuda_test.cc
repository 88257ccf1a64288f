// The CUDA flash attention platform against the CPU reference on fresh random inputs: every
// compiled config, head dims 32, 64, 96, 128 and 256, odd lengths, GQA/MQA, each option alone and
// combined, varlen. Outputs are poisoned before each launch, and each config runs twice for the
// same bits. Skips where no GPU is visible.
#include "kernels/flash_attention/cuda/flash_attention_cuda.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/kernels/flash_attention/cuda/flash_attention_bwd_test_util.h"
#include "tests/support/testing.h"

namespace kernelserve::cuda {
namespace {

constexpr DType kTypes[] = {DType::kF16, DType::kBF16};
constexpr int64_t kHeadDims[] = {32, 64, 96, 128, 256};

// Relative error allowed by issue 5: ||out - ref|| / ||ref||.
double Tolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2 : 5e-3; }

// q, k and v of the dense form ([B,S,H,D]) or, with b = 0, the varlen form ([T,H,D]).
TensorMap Qkv(DType dtype, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
              uint64_t seed) {
  const Shape q = b > 0 ? Shape{b, sq, hq, d} : Shape{sq, hq, d};
  const Shape kv = b > 0 ? Shape{b, sk, hkv, d} : Shape{sk, hkv, d};
  // q wider than k: logits of a few units, so the softmax is far from uniform.
  return {{"q", RandomTensor(dtype, q, seed, -2.0f, 2.0f)},
          {"k", RandomTensor(dtype, kv, seed + 1, -1.0f, 1.0f)},
          {"v", RandomTensor(dtype, kv, seed + 2, -1.0f, 1.0f)}};
}

bool AnyNan(const Tensor& t) {
  for (float x : t.ToFloats()) {
    if (std::isnan(x)) return true;
  }
  return false;
}

class FlashAttentionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = EnumerateCudaDevices();
    if (devices_.empty()) {
      GTEST_SKIP() << "no CUDA device visible (no driver or no GPU): GPU tests run on a GPU "
                      "machine, see docs/GPU.md";
    }
    kernel_ = MakeFlashAttention();
  }

  const DeviceInfo& gpu() const { return devices_.front(); }
  const PlatformImpl& cuda_impl() const { return *kernel_->impl(Platform::kCuda); }

  // The kernel's analysis of `inputs` with `params` (made canonical as the executor does).
  absl::StatusOr<std::shared_ptr<const Problem>> Analyze(const TensorMap& inputs,
                                                         const Attributes& params) const {
    KS_ASSIGN_OR_RETURN(const Attributes attrs, kernel_->schema().CanonicalParams(params));
    return kernel_->Analyze(SpecsOf(inputs), attrs);
  }

  absl::StatusOr<TensorMap> Reference(const TensorMap& inputs, const Attributes& attrs) const {
    KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem, Analyze(inputs, attrs));
    KS_RETURN_IF_ERROR(kernel_->ValidateData(*problem, inputs));
    const DeviceInfo cpu = CpuDeviceInfo();
    const PlatformImpl& impl = *kernel_->impl(Platform::kCpu);
    KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, impl.Prepare(*problem, inputs, cpu));
    KS_RETURN_IF_ERROR(run->Launch(impl.Heuristic(*problem, cpu)).status());
    return run->Fetch();
  }

  // Runs the heuristic config and every candidate on the GPU twice (outputs poisoned before
  // each), compares out (and lse) with the CPU reference and the second run's bits with the
  // first's. Returns the number of configs run.
  int Check(const TensorMap& inputs, const Attributes& attrs, const std::string& label) const {
    absl::StatusOr<TensorMap> want = Reference(inputs, attrs);
    EXPECT_TRUE(want.ok()) << label << ": " << want.status();
    if (!want.ok()) return 0;
    const std::shared_ptr<const Problem> problem = *Analyze(inputs, attrs);
    std::vector<KernelConfig> configs = cuda_impl().Candidates(*problem, gpu());
    EXPECT_FALSE(configs.empty()) << label;
    if (!configs.empty()) {
      EXPECT_EQ(configs.front(), cuda_impl().Heuristic(*problem, gpu())) << label;
    }
    absl::StatusOr<std::unique_ptr<PreparedRun>> run = cuda_impl().Prepare(*problem, inputs, gpu());
    EXPECT_TRUE(run.ok()) << label << ": " << run.status();
    if (!run.ok()) return 0;
    const DType dtype = inputs.at("q").dtype();
    for (const KernelConfig& config : configs) {
      const std::string where = label + " config {" + config.DebugString() + "}";
      const absl::Status checked = cuda_impl().CheckConfig(config, *problem, gpu());
      EXPECT_TRUE(checked.ok()) << where << ": " << checked;
      std::string first_bits;
      for (int round = 0; round < 2; ++round) {
        const absl::StatusOr<std::string> bits = RunAndCompare(**run, config, *want, dtype, where);
        if (!bits.ok()) break;  // the failure is reported
        if (round == 0) first_bits = *bits;
        EXPECT_TRUE(*bits == first_bits) << where << ": not the same bits twice";
      }
    }
    return static_cast<int>(configs.size());
  }

  // One launch of `config` on poisoned outputs, compared with `want`; returns the bytes of out
  // and lse, or an error where the launch or the fetch failed (reported here).
  static absl::StatusOr<std::string> RunAndCompare(PreparedRun& run, const KernelConfig& config,
                                                   const TensorMap& want, DType dtype,
                                                   const std::string& where) {
    EXPECT_TRUE(PoisonOutputs(run).ok()) << where;
    absl::StatusOr<double> seconds = run.Launch(config);
    EXPECT_TRUE(seconds.ok()) << where << ": " << seconds.status();
    if (!seconds.ok()) return seconds.status();
    absl::StatusOr<TensorMap> got = run.Fetch();
    EXPECT_TRUE(got.ok()) << where << ": " << got.status();
    if (!got.ok()) return got.status();
    const Tensor& out = got->at("out");
    EXPECT_FALSE(AnyNan(out)) << where << ": NaN in out (an element left unwritten?)";
    EXPECT_LT(RelativeError(out, want.at("out")), Tolerance(dtype)) << where;
    std::string bits(out.bytes());
    if (want.contains("lse")) {
      EXPECT_TRUE(got->contains("lse")) << where;
      if (got->contains("lse")) {
        EXPECT_EQ(LseMismatch(got->at("lse"), want.at("lse")), "") << where;
        bits += got->at("lse").bytes();
      }
    }
    return bits;
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Kernel> kernel_;
};

std::string Label(DType dtype, int64_t d, const std::string& what) {
  return absl::StrCat(Sv(DTypeName(dtype)), " D=", d, " ", what);
}

TEST_F(FlashAttentionGpuTest, OddLengthsCausalAndNotMatchTheCpuReference) {
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1}, {7, 7}, {129, 129}, {1000, 1000}, {7, 129}, {129, 7}, {1, 1000}};
  uint64_t seed = 1000;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      for (const auto& [sq, sk] : lengths) {
        for (bool causal : {false, true}) {
          seed += 3;
          const Attributes attrs = {{"causal", causal}, {"return_lse", true}};
          Check(Qkv(dtype, 2, sq, sk, 4, 4, d, seed), attrs,
                Label(dtype, d, absl::StrCat("Sq=", sq, " Sk=", sk, " causal=", causal)));
        }
      }
    }
  }
}

TEST_F(FlashAttentionGpuTest, GqaAndMqaMatch) {
  uint64_t seed = 2000;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      for (const auto& [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{16, 2}, {8, 1}}) {
        for (bool causal : {false, true}) {
          seed += 3;
          Check(Qkv(dtype, 2, 257, 300, hq, hkv, d, seed), {{"causal", causal}},
                Label(dtype, d, absl::StrCat("Hq=", hq, " Hkv=", hkv, " causal=", causal)));
        }
      }
    }
  }
}

TEST_F(FlashAttentionGpuTest, EachOptionAloneMatches) {
  const std::vector<std::pair<std::string, Attributes>> options = {
      {"scale 0.3", {{"softmax_scale", 0.3}}},
      {"window 32/0", {{"window_left", int64_t{32}}, {"window_right", int64_t{0}}}},
      {"window 5/9", {{"window_left", int64_t{5}}, {"window_right", int64_t{9}}}},
      {"window left 70 only", {{"window_left", int64_t{70}}}},
      {"soft cap 2", {{"logits_soft_cap", 2.0}, {"return_lse", true}}},
      {"causal + window 64/0", {{"causal", true}, {"window_left", int64_t{64}}}},
  };
  uint64_t seed = 3000;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      for (const auto& [name, attrs] : options) {
        seed += 3;
        Check(Qkv(dtype, 2, 200, 333, 4, 2, d, seed), attrs, Label(dtype, d, name));
      }
    }
  }
}

// More query tiles than a GPU has SMs, under windows: the persistent kernel's blocks draw
// items of different lengths from its counter.
TEST_F(FlashAttentionGpuTest, WindowsOverMoreItemsThanSmsMatch) {
  const Attributes windows[] = {{{"window_left", int64_t{150}}, {"window_right", int64_t{40}}},
                                {{"window_right", int64_t{0}}}};
  uint64_t seed = 3500;
  for (const Attributes& attrs : windows) {
    for (int64_t d : {64, 128}) {
      seed += 3;
      const int64_t b = d == 64 ? 2 : 1, hq = d == 64 ? 8 : 16;
      Check(Qkv(DType::kBF16, b, 1100, 1100, hq, 2, d, seed), attrs,
            Label(DType::kBF16, d, "window over many items"));
    }
  }
}

// Key lengths of 130 (rows of bias not a multiple of 16 bytes: read from global memory) and
// of 132 and 260 (the warp-specialized kernel reads them by tiles into shared memory, the
// last tile partly past the keys), every broadcast of the batch and head dims.
TEST_F(FlashAttentionGpuTest, BiasWithBroadcastMatches) {
  uint64_t seed = 4000;
  const int64_t b = 2, h = 4;
  const std::pair<int64_t, int64_t> lengths[] = {{130, 130}, {132, 132}, {100, 260}};
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      for (const auto& [sq, sk] : lengths) {
        for (const Shape& shape : {Shape{b, h, sq, sk}, Shape{1, h, sq, sk}, Shape{b, 1, sq, sk}}) {
          seed += 4;
          TensorMap inputs = Qkv(dtype, b, sq, sk, h, h, d, seed);
          inputs["bias"] = RandomTensor(DType::kF32, shape, seed + 3, -3.0f, 3.0f);
          Check(inputs, {{"causal", true}, {"return_lse", true}},
                Label(dtype, d, "bias " + ShapeString(shape)));
        }
      }
    }
  }
}

// A bias without a causal mask: every key tile of a row but the last is whole, so the
// warp-specialized kernel's consumers take each tile's bias from shared memory between their
// products for many tiles in a row (5 whole key tiles of 128 at D <= 128, 10 of 64 at D = 256,
// then a partial one).
TEST_F(FlashAttentionGpuTest, BiasWithoutAMaskMatches) {
  uint64_t seed = 4500;
  const int64_t b = 2, h = 3, sq = 300, sk = 644;
  for (int64_t d : {64, 128, 256}) {
    for (const Shape& shape : {Shape{b, h, sq, sk}, Shape{1, 1, sq, sk}}) {
      seed += 4;
      TensorMap inputs = Qkv(DType::kBF16, b, sq, sk, h, h, d, seed);
      inputs["bias"] = RandomTensor(DType::kF32, shape, seed + 3, -3.0f, 3.0f);
      Check(inputs, {{"return_lse", true}},
            Label(DType::kBF16, d, "bias without a mask " + ShapeString(shape)));
    }
  }
}

TEST_F(FlashAttentionGpuTest, SegmentIdsMatchAndPaddingRowsAreZero) {
  uint64_t seed = 5000;
  const int64_t b = 2, s = 150;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      seed += 5;
      TensorMap inputs = Qkv(dtype, b, s, s, 4, 1, d, seed);
      inputs["q_segment_ids"] = Segments(b, s, seed + 3);
      inputs["kv_segment_ids"] = inputs.at("q_segment_ids");
      Check(inputs, {{"return_lse", true}}, Label(dtype, d, "segments"));
    }
  }
}

// Documents of hundreds of tokens: most key tiles lie inside one document for every row of a
// tile (the kernels skip their segment mask), the others straddle a boundary or padding.
TEST_F(FlashAttentionGpuTest, LongSegmentsMatch) {
  const int64_t b = 2, s = 1500;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      const int64_t shift = i * 97;  // the second sequence's boundaries fall elsewhere in tiles
      ids.push_back(j >= s - 10 ? 0 : j < 600 + shift ? 1 : j < 1300 - shift ? 2 : 3);
    }
  }
  uint64_t seed = 5500;
  for (int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      seed += 5;
      TensorMap inputs = Qkv(DType::kBF16, b, s, s, 2, 1, d, seed);
      inputs["q_segment_ids"] = Tensor::FromInts(DType::kI64, {b, s}, ids);
      inputs["kv_segment_ids"] = inputs.at("q_segment_ids");
      Check(inputs, {{"causal", causal}, {"return_lse", true}},
            Label(DType::kBF16, d, absl::StrCat("long segments causal=", causal)));
    }
  }
}

// Query and key segment ids of different lengths (Sq 300, Sk 700): the keys' segments change
// inside a chunk of 64 keys (at 130) and on a chunk's edge (at 640), and the last chunk is
// partial, so the per-chunk ids the warp-specialized kernel reads (FlashWsSchedule::
// key_chunk_segments) mark whole tiles in one segment, tiles across a change, and the tail.
TEST_F(FlashAttentionGpuTest, KeySegmentChunksMatch) {
  const int64_t b = 2, sq = 300, sk = 700;
  std::vector<int64_t> q_ids, kv_ids;
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < sq; ++j) q_ids.push_back(j < 100 ? 1 : j < 250 + 40 * i ? 2 : 3);
    for (int64_t j = 0; j < sk; ++j) kv_ids.push_back(j < 130 ? 1 : j < 640 ? 2 : 3);
  }
  uint64_t seed = 5700;
  for (int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      seed += 5;
      TensorMap inputs = Qkv(DType::kBF16, b, sq, sk, 2, 1, d, seed);
      inputs["q_segment_ids"] = Tensor::FromInts(DType::kI64, {b, sq}, q_ids);
      inputs["kv_segment_ids"] = Tensor::FromInts(DType::kI64, {b, sk}, kv_ids);
      Check(inputs, {{"causal", causal}, {"return_lse", true}},
            Label(DType::kBF16, d, absl::StrCat("key segment chunks causal=", causal)));
    }
  }
}

TEST_F(FlashAttentionGpuTest, EveryOptionCombinedMatches) {
  uint64_t seed = 6000;
  const int64_t b = 2, s = 260;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      seed += 5;
      TensorMap inputs = Qkv(dtype, b, s, s, 8, 2, d, seed);
      inputs["bias"] = RandomTensor(DType::kF32, {1, 8, s, s}, seed + 3, -1.0f, 1.0f);
      inputs["q_segment_ids"] = Segments(b, s, seed + 4);
      inputs["kv_segment_ids"] = inputs.at("q_segment_ids");
      const Attributes attrs = {{"causal", true},
                                {"window_left", int64_t{100}},
                                {"logits_soft_cap", 5.0},
                                {"softmax_scale", 0.2},
                                {"return_lse", true}};
      Check(inputs, attrs, Label(dtype, d, "combined"));
    }
  }
}

TEST_F(FlashAttentionGpuTest, VarlenFrom1To2048Matches) {
  // Empty sequences first, inside and last; Sq != Sk per sequence; spare rows past the end.
  const std::vector<int64_t> q_lengths = {0, 1, 7, 2048, 129, 0, 1000, 64, 3};
  const std::vector<int64_t> k_lengths = {5, 1, 9, 2048, 100, 0, 1000, 65, 0};
  int64_t tq = 0, tk = 0;
  for (int64_t n : q_lengths) tq += n;
  for (int64_t n : k_lengths) tk += n;
  uint64_t seed = 7000;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      for (bool causal : {false, true}) {
        seed += 3;
        TensorMap inputs = Qkv(dtype, 0, tq + 3, tk + 2, 8, 2, d, seed);
        inputs["cu_seqlens_q"] = Offsets(q_lengths);
        inputs["cu_seqlens_k"] = Offsets(k_lengths);
        Check(inputs, {{"causal", causal}, {"return_lse", true}},
              Label(dtype, d, absl::StrCat("varlen causal=", causal)));
      }
    }
  }
}

// More sequences than the scheduling pass numbers in one chunk (1024), many of them without
// rows or keys: the persistent kernel's items are the tiles of the sequences with rows, found
// from the prefix sums of their tiles.
TEST_F(FlashAttentionGpuTest, VarlenOfThousandsOfShortSequencesMatches) {
  std::vector<int64_t> q_lengths, k_lengths;
  int64_t tq = 0, tk = 0;
  for (int64_t i = 0; i < 2500; ++i) {
    q_lengths.push_back((i * 37) % 23);  // 0..22: every 23rd sequence has no rows
    k_lengths.push_back((i * 11) % 19);  // 0..18: every 19th has no keys
    tq += q_lengths.back();
    tk += k_lengths.back();
  }
  uint64_t seed = 7300;
  for (DType dtype : kTypes) {
    for (int64_t d : {64, 128}) {
      seed += 3;
      TensorMap inputs = Qkv(dtype, 0, tq, tk, 4, 2, d, seed);
      inputs["cu_seqlens_q"] = Offsets(q_lengths);
      inputs["cu_seqlens_k"] = Offsets(k_lengths);
      Check(inputs, {{"causal", true}, {"return_lse", true}},
            Label(dtype, d, "2500 short sequences, causal"));
    }
  }
}

// Rows of k and v past every sequence hold NaN: a kernel that reads a sequence's last key
// tile whole (the warp-specialized one loads tiles of the packed tensor) must mask those keys
// and keep their values out of P V.
TEST_F(FlashAttentionGpuTest, RowsPastEverySequenceAreNeverSeen) {
  const std::vector<int64_t> q_lengths = {5, 300, 77};
  const std::vector<int64_t> k_lengths = {130, 7, 200};
  const int64_t tq = 382, tk = 337, spare = 50;
  uint64_t seed = 7500;
  for (DType dtype : kTypes) {
    for (int64_t d : kHeadDims) {
      seed += 3;
      TensorMap inputs = Qkv(dtype, 0, tq, tk + spare, 8, 2, d, seed);
      for (const char* name : {"k", "v"}) {
        std::vector<float> values = inputs.at(name).ToFloats();
        for (size_t i = static_cast<size_t>(tk * 2 * d); i < values.size(); ++i) values[i] = NAN;
        inputs[name] = Tensor::FromFloats(dtype, {tk + spare, 2, d}, values);
      }
      inputs["cu_seqlens_q"] = Offsets(q_lengths);
      inputs["cu_seqlens_k"] = Offsets(k_lengths);
      Check(inputs, {{"causal", false}}, Label(dtype, d, "NaN past the sequences"));
    }
  }
}

TEST_F(FlashAttentionGpuTest, LargeCausalGqaMatches) {
  Check(Qkv(DType::kBF16, 1, 2048, 2048, 16, 2, 128, 8000), {{"causal", true}},
        "bf16 D=128 [1,2048] Hq=16 Hkv=2 causal");
}

TEST_F(FlashAttentionGpuTest, UnsupportedInputsAreUnimplemented) {
  for (const TensorMap& inputs : {Qkv(DType::kF32, 1, 16, 16, 2, 2, 64, 9000),
                                  Qkv(DType::kBF16, 1, 16, 16, 2, 2, 36, 9003)}) {
    const std::shared_ptr<const Problem> problem = *Analyze(inputs, {});
    EXPECT_EQ(cuda_impl().Supports(*problem, gpu()).code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(cuda_impl().Prepare(*problem, inputs, gpu()).status().code(),
              absl::StatusCode::kUnimplemented);
  }
}

TEST_F(FlashAttentionGpuTest, ConfigOutsideTheCompiledSpaceIsRejected) {
  const TensorMap inputs = Qkv(DType::kBF16, 1, 16, 16, 2, 2, 64, 9100);
  const std::shared_ptr<const Problem> problem = *Analyze(inputs, {});
  absl::StatusOr<std::unique_ptr<PreparedRun>> run = cuda_impl().Prepare(*problem, inputs, gpu());
  ASSERT_TRUE(run.ok()) << run.status();
  KernelConfig config = FlashAttentionHeuristic(ProblemAs<FlashAttentionProblem>(*problem), gpu());
  config.block_k = 48;
  EXPECT_EQ((*run)->Launch(config).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kernelserve::cuda
