#include "kernels/mean_pooling/cpu/mean_pooling.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/runtime/cpu/checks.h"
#include "tests/support/testing.h"

namespace kernelserve::cpu {
namespace {

using ::testing::HasSubstr;

// One pooling problem with its inputs. Dense / masked: B sequences of S rows; varlen: the
// sequences of `cu` over x [T,H].
struct Problem {
  DType dtype = DType::kF32;
  int64_t num_sequences = 0;
  int64_t seq_len = 0;
  int64_t hidden = 0;
  std::vector<int64_t> cu;    // varlen when not empty
  std::vector<uint8_t> mask;  // masked when not empty
  Tensor x;
};

Problem Dense(DType dtype, int64_t b, int64_t s, int64_t h, uint64_t seed) {
  return {dtype, b, s, h, {}, {}, RandomTensor(dtype, {b * s, h}, seed)};
}

Problem Masked(DType dtype, int64_t b, int64_t s, int64_t h, uint64_t seed) {
  Problem p = Dense(dtype, b, s, h, seed);
  const std::vector<int64_t> bits = RandomTensor(DType::kBool, {b, s}, seed + 7).ToInts();
  for (int64_t bit : bits) p.mask.push_back(static_cast<uint8_t>(bit));
  return p;
}

Problem Varlen(DType dtype, const std::vector<int64_t>& cu, int64_t total, int64_t h,
               uint64_t seed) {
  return {dtype, static_cast<int64_t>(cu.size()) - 1,  0, h, cu,
          {},    RandomTensor(dtype, {total, h}, seed)};
}

// The float64 mean of the counted rows of each sequence; 0 for a sequence without any.
std::vector<double> Reference(const Problem& p) {
  const std::vector<double> x = p.x.ToDoubles();
  std::vector<double> out(static_cast<size_t>(p.num_sequences * p.hidden), 0.0);
  for (int64_t n = 0; n < p.num_sequences; ++n) {
    const int64_t first = p.cu.empty() ? n * p.seq_len : p.cu[n];
    const int64_t last = p.cu.empty() ? first + p.seq_len : p.cu[n + 1];
    int64_t count = 0;
    for (int64_t r = first; r < last; ++r) {
      if (!p.mask.empty() && p.mask[static_cast<size_t>(r)] == 0) continue;
      ++count;
      for (int64_t h = 0; h < p.hidden; ++h) out[n * p.hidden + h] += x[r * p.hidden + h];
    }
    for (int64_t h = 0; h < p.hidden && count > 0; ++h) out[n * p.hidden + h] /= count;
  }
  return out;
}

// Runs the kernel into a NaN-poisoned output.
absl::StatusOr<Tensor> RunPooling(const Problem& p, const KernelConfig& config) {
  Tensor out = Tensor::Empty(p.dtype, {p.num_sequences, p.hidden});
  for (int64_t i = 0; i < out.numel(); ++i) out.SetFloat(i, std::nanf(""));
  MeanPoolingArgs args;
  args.dtype = p.dtype;
  args.x = p.x.data();
  args.out = out.data();
  args.total_rows = p.x.dim(0);
  args.hidden = p.hidden;
  args.num_sequences = p.num_sequences;
  args.seq_len = p.seq_len;
  args.cu_seqlens = p.cu.empty() ? nullptr : p.cu.data();
  args.mask = p.mask.empty() ? nullptr : p.mask.data();
  absl::Status status = MeanPoolingCpu(args, config);
  if (!status.ok()) return status;
  return out;
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 5e-3;
    case DType::kBF16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

void ExpectMatchesReference(const Problem& p, const KernelConfig& config) {
  absl::StatusOr<Tensor> out = RunPooling(p, config);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> got = out->ToDoubles();
  for (double v : got) ASSERT_FALSE(std::isnan(v));
  const std::vector<double> want = Reference(p);
  EXPECT_LT(RelativeError(got, want), Tolerance(p.dtype));
}

TEST(MeanPoolingCpuTest, DenseMatchesReferenceOnOddShapes) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t b : {1, 3}) {
      for (int64_t s : {1, 7, 129}) {
        for (int64_t h : {1, 17, 1000}) {
          SCOPED_TRACE(testing::Message()
                       << DTypeName(dtype) << " B=" << b << " S=" << s << " H=" << h);
          ExpectMatchesReference(Dense(dtype, b, s, h, seed++), KernelConfig{});
        }
      }
    }
  }
}

TEST(MeanPoolingCpuTest, MaskedMatchesReference) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t s : {1, 7, 129}) {
      for (int64_t h : {1, 17, 1000}) {
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " S=" << s << " H=" << h);
        ExpectMatchesReference(Masked(dtype, 3, s, h, seed++), KernelConfig{});
      }
    }
  }
}

TEST(MeanPoolingCpuTest, VarlenMatchesReferenceWithEmptySequencesAndUnusedTail) {
  uint64_t seed = 200;
  // Lengths 7, 0, 129, 1, 0 over 140 rows (three rows past the last sequence are unused).
  const std::vector<int64_t> cu = {0, 7, 7, 136, 137, 137};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t h : {1, 17, 1000}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " H=" << h);
      ExpectMatchesReference(Varlen(dtype, cu, 140, h, seed++), KernelConfig{});
    }
  }
}

TEST(MeanPoolingCpuTest, EmptySequencesAndAllMaskedRowsGiveZeros) {
  Problem varlen = Varlen(DType::kBF16, {0, 5, 5, 9}, 9, 33, 300);
  absl::StatusOr<Tensor> out = RunPooling(varlen, KernelConfig{});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t h = 0; h < 33; ++h) EXPECT_EQ(out->GetFloat(33 + h), 0.0f) << h;

  Problem masked = Masked(DType::kF32, 2, 9, 20, 301);
  std::fill(masked.mask.begin(), masked.mask.begin() + 9, 0);  // row 0 fully masked
  masked.mask[9] = 1;
  out = RunPooling(masked, KernelConfig{});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t h = 0; h < 20; ++h) EXPECT_EQ(out->GetFloat(h), 0.0f) << h;
  EXPECT_LT(RelativeError(out->ToDoubles(), Reference(masked)), 1e-5);
}

TEST(MeanPoolingCpuTest, BlockSizeAndThreadsDoNotChangeTheBits) {
  // Long sequences so that small blocks split them over several work items.
  const std::vector<Problem> problems = {
      Varlen(DType::kF32, {0, 1000, 1000, 1001, 1450}, 1450, 37, 400),
      Masked(DType::kBF16, 3, 333, 29, 401), Dense(DType::kF16, 2, 517, 64, 402)};
  for (const Problem& p : problems) {
    KernelConfig first;
    first.block_size = 1;
    first.named["threads"] = 1;
    absl::StatusOr<Tensor> baseline = RunPooling(p, first);
    ASSERT_TRUE(baseline.ok()) << baseline.status();
    ASSERT_LT(RelativeError(baseline->ToDoubles(), Reference(p)), Tolerance(p.dtype));
    for (int block : {7, 16, 32, 100, 2048}) {
      for (int threads : {1, 2, 3, 8}) {
        SCOPED_TRACE(testing::Message() << "block=" << block << " threads=" << threads);
        KernelConfig config;
        config.block_size = block;
        config.named["threads"] = threads;
        config.platform = "cpu";
        absl::StatusOr<Tensor> out = RunPooling(p, config);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(out->bytes(), baseline->bytes());
      }
    }
  }
}

TEST(MeanPoolingCpuTest, RejectsBadOffsetsAndConfigs) {
  Problem p = Varlen(DType::kF32, {0, 4, 9}, 8, 3, 500);  // ends past the 8 rows
  absl::StatusOr<Tensor> out = RunPooling(p, KernelConfig{});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("cu_seqlens"));
  p.cu = {1, 4, 8};
  EXPECT_EQ(RunPooling(p, KernelConfig{}).status().code(), absl::StatusCode::kInvalidArgument);
  p.cu = {0, 5, 4};
  EXPECT_EQ(RunPooling(p, KernelConfig{}).status().code(), absl::StatusCode::kInvalidArgument);

  Problem dense = Dense(DType::kF32, 2, 3, 4, 501);
  KernelConfig config;
  config.platform = "cuda";
  out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("platform"));
  config = KernelConfig{};
  config.named["threads"] = -1;
  out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("threads"));
}

// Huge fields are refused before anything is sized from them (they once allocated scratch
// per requested thread and threw std::bad_alloc).
TEST(MeanPoolingCpuTest, ConfigOutsideTheLimitsIsRefusedWithTheRange) {
  Problem dense = Dense(DType::kF32, 1, 1, 1, 7);
  KernelConfig config;
  config.named["threads"] = 1000000000;
  absl::StatusOr<Tensor> out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("threads=1000000000"));
  EXPECT_THAT(out.status().message(), HasSubstr("0..1024"));
  config = KernelConfig{};
  config.block_size = 1000000000;
  out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("block_size"));
  config = KernelConfig{};
  config.block_q = 64;
  out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("block_q is not a field of mean_pooling on cpu"));
  config = KernelConfig{};
  config.num_warps = 4;  // the CPU's threads before config schema 2: refused, naming the new field
  out = RunPooling(dense, config);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      out.status().message(),
      "config num_warps=4: num_warps is not a field of mean_pooling on cpu; the field for the "
      "cpu platform's worker threads is 'threads' (0..1024)");
  config = KernelConfig{};
  config.named["threads"] = kMaxCpuThreads;
  config.block_size = kMaxCpuBlockRows;
  EXPECT_TRUE(RunPooling(dense, config).ok());
}

}  // namespace
}  // namespace kernelserve::cpu
