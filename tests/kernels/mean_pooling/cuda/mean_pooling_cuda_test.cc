// The CUDA mean pooling platform against the CPU reference, on every form, dtype and config of
// the candidate space, over odd and large shapes. Skips where no GPU is visible.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "tests/kernels/runtime/cuda/cuda_test_util.h"

namespace kernelserve::cuda::testing {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr int64_t kOddBatches[] = {1, 3};
constexpr int64_t kOddSeqs[] = {1, 7, 129};
constexpr int64_t kOddHidden[] = {1, 17, 1000};

// Configs that force the paths the heuristic may not take for a shape: the smallest chunk
// (sequences split over many blocks), one lane (many tiles), 4 warps.
std::vector<KernelConfig> Stress() {
  return {Config(4, 1, 4, 32), Config(8, 256, 8, 32), Config(4, 32, 8, 64)};
}

// Mask with random rows; with more than one sequence, sequence 0 has no counted row.
Tensor RandomMask(DType dtype, int64_t b, int64_t s, uint64_t seed) {
  Tensor mask = RandomTensor(dtype, {b, s}, seed, 0.0f, 1.0f);
  if (b > 1) {
    for (int64_t i = 0; i < s; ++i) mask.SetFloat(i, 0.0f);
  }
  return mask;
}

TEST_F(GpuTest, DenseOddShapesMatchTheCpuReference) {
  uint64_t seed = 100;
  for (DType dtype : kFloatTypes) {
    for (int64_t b : kOddBatches) {
      for (int64_t s : kOddSeqs) {
        for (int64_t h : kOddHidden) {
          const TensorMap inputs = {{"x", RandomX(dtype, {b, s, h}, ++seed)}};
          CheckAllConfigs(inputs,
                          absl::StrCat("dense ", Sv(DTypeName(dtype)), "[", b, ",", s, ",", h, "]"),
                          Stress());
        }
      }
    }
  }
}

TEST_F(GpuTest, MaskedOddShapesMatchTheCpuReference) {
  uint64_t seed = 200;
  const DType mask_types[] = {DType::kBool, DType::kI32, DType::kI64};
  int which = 0;
  for (DType dtype : kFloatTypes) {
    for (int64_t b : kOddBatches) {
      for (int64_t s : kOddSeqs) {
        for (int64_t h : kOddHidden) {
          const DType mask_type = mask_types[which++ % 3];
          const TensorMap inputs = {{"x", RandomX(dtype, {b, s, h}, ++seed)},
                                    {"mask", RandomMask(mask_type, b, s, ++seed)}};
          CheckAllConfigs(inputs,
                          absl::StrCat("masked ", Sv(DTypeName(dtype)), "[", b, ",", s, ",", h,
                                       "] mask ", Sv(DTypeName(mask_type))),
                          Stress());
        }
      }
    }
  }
}

TEST_F(GpuTest, VarlenOddShapesMatchTheCpuReference) {
  // Empty sequences first, inside and last; rows of x past the last sequence are not read.
  const std::vector<std::vector<int64_t>> batches = {
      {7}, {1, 7, 129}, {0, 129, 0, 1, 7, 0}, {129, 129, 0}};
  uint64_t seed = 300;
  for (DType dtype : kFloatTypes) {
    for (int64_t h : kOddHidden) {
      for (size_t i = 0; i < batches.size(); ++i) {
        int64_t rows = 0;
        for (int64_t n : batches[i]) rows += n;
        const int64_t spare = static_cast<int64_t>(i % 2) * 5;  // unused trailing rows
        const bool rank3 = i % 2 == 0;
        const DType offsets_type = i < 2 ? DType::kI32 : DType::kI64;
        const Shape shape = rank3 ? Shape{1, rows + spare, h} : Shape{rows + spare, h};
        const TensorMap inputs = {{"x", RandomX(dtype, shape, ++seed)},
                                  {"cu_seqlens", Offsets(offsets_type, batches[i])}};
        CheckAllConfigs(
            inputs, absl::StrCat("varlen ", Sv(DTypeName(dtype)), ShapeString(shape), " batch ", i),
            Stress());
      }
    }
  }
}

TEST_F(GpuTest, SkewedVarlenFrom1To100kRowsMatches) {
  const std::vector<int64_t> lengths = {1, 100000, 0, 3, 4096, 1, 77777, 2};
  int64_t rows = 0;
  for (int64_t n : lengths) rows += n;
  uint64_t seed = 400;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const TensorMap inputs = {{"x", RandomX(dtype, {rows, 64}, ++seed)},
                              {"cu_seqlens", Offsets(DType::kI64, lengths)}};
    CheckAllConfigs(inputs, absl::StrCat("skewed varlen ", Sv(DTypeName(dtype))), Stress());
  }
}

TEST_F(GpuTest, LargeShapesMatchTheCpuReference) {
  const TensorMap dense = {{"x", RandomX(DType::kBF16, {8, 2048, 4096}, 501)}};
  CheckAllConfigs(dense, "dense bf16[8,2048,4096]");
  TensorMap masked = {{"x", dense.at("x")}, {"mask", RandomMask(DType::kBool, 8, 2048, 502)}};
  CheckAllConfigs(masked, "masked bf16[8,2048,4096]");
  CheckAllConfigs({{"x", RandomX(DType::kF32, {2, 4099, 1000}, 503)}}, "dense f32[2,4099,1000]");
  std::vector<int64_t> lengths;
  Tensor draw = RandomTensor(DType::kI64, {64}, 504, 1.0f, 4096.0f);
  int64_t rows = 0;
  for (int64_t i = 0; i < 64; ++i) {
    lengths.push_back(draw.GetInt(i));
    rows += lengths.back();
  }
  CheckAllConfigs({{"x", RandomX(DType::kF16, {rows, 1024}, 505)},
                   {"cu_seqlens", Offsets(DType::kI32, lengths)}},
                  "varlen f16 64 sequences of 1..4096 rows, H=1024");
}

}  // namespace
}  // namespace kernelserve::cuda::testing
