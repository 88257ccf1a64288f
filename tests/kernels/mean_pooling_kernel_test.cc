#include "kernels/mean_pooling_kernel.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/utils/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/mean_pooling_config.h"
#include "tests/support/kernel_run.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::CpuDevice;
using ::testing::HasSubstr;

TensorSpec Spec(DType dtype, Shape shape) { return TensorSpec{dtype, std::move(shape)}; }

// Runs the kernel's CPU implementation the way the executor does; its one output `out`.
absl::StatusOr<Tensor> RunCpu(const Kernel& kernel, const TensorMap& inputs,
                              const Attributes& attrs, const KernelConfig& config) {
  absl::StatusOr<TensorMap> outputs =
      ::kernelserve::testing::RunOnCpu(kernel, inputs, attrs, config);
  if (!outputs.ok()) return outputs.status();
  if (outputs->size() != 1 || !outputs->contains("out")) return absl::InternalError("outputs");
  return outputs->at("out");
}

// float64 mean pooling of x [rows,H] over the row ranges [cu[n], cu[n+1]), skipping rows
// whose `keep` entry is 0 (when keep is not empty).
std::vector<double> Reference(const Tensor& x, const std::vector<int64_t>& cu,
                              const std::vector<int64_t>& keep) {
  const int64_t h_count = x.dim(x.rank() - 1);
  const std::vector<double> values = x.ToDoubles();
  std::vector<double> out;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    std::vector<double> sum(static_cast<size_t>(h_count), 0.0);
    int64_t count = 0;
    for (int64_t r = cu[n]; r < cu[n + 1]; ++r) {
      if (!keep.empty() && keep[static_cast<size_t>(r)] == 0) continue;
      ++count;
      for (int64_t h = 0; h < h_count; ++h) sum[h] += values[r * h_count + h];
    }
    for (double s : sum) out.push_back(count == 0 ? 0.0 : s / count);
  }
  return out;
}

TEST(MeanPoolingKernelTest, IdentityAndDocs) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingKernel();
  EXPECT_EQ(kernel->id(), "mean_pooling@v1");
  ASSERT_NE(kernel->impl(Platform::kCpu), nullptr);
  EXPECT_EQ(kernel->impl(Platform::kCpu)->platform(), Platform::kCpu);
  std::set<std::string> inputs;
  for (const ArgDoc& doc : kernel->input_docs()) {
    inputs.insert(doc.name);
    EXPECT_FALSE(doc.doc.empty()) << doc.name;
  }
  EXPECT_EQ(inputs, (std::set<std::string>{"x", "mask", "cu_seqlens"}));
  ASSERT_EQ(kernel->output_docs().size(), 1u);
  EXPECT_EQ(kernel->output_docs()[0].name, "out");
  ASSERT_EQ(kernel->attribute_docs().size(), 1u);
  EXPECT_EQ(kernel->attribute_docs()[0].name, "chunk_size");
}

TEST(MeanPoolingKernelTest, AcceptsEveryForm) {
  MeanPoolingKernel kernel;
  const std::vector<TensorSpecMap> ok = {
      {{"x", Spec(DType::kF32, {2, 5, 3})}},
      {{"x", Spec(DType::kBF16, {2, 5, 3})}, {"mask", Spec(DType::kBool, {2, 5})}},
      {{"x", Spec(DType::kF16, {2, 5, 3})}, {"mask", Spec(DType::kI32, {2, 5})}},
      {{"x", Spec(DType::kF32, {2, 5, 3})}, {"mask", Spec(DType::kI64, {2, 5})}},
      {{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {4})}},
      {{"x", Spec(DType::kF16, {1, 9, 3})}, {"cu_seqlens", Spec(DType::kI64, {1})}}};
  for (const TensorSpecMap& inputs : ok) EXPECT_TRUE(kernel.Validate(inputs, {}).ok());
  EXPECT_TRUE(kernel.Validate(ok[0], {{"chunk_size", int64_t{7}}}).ok());
}

struct BadCase {
  TensorSpecMap inputs;
  Attributes attrs;
  std::string substring;
};

TEST(MeanPoolingKernelTest, ValidateNamesEveryWrongInput) {
  MeanPoolingKernel kernel;
  const TensorSpec x = Spec(DType::kF32, {2, 5, 3});
  const std::vector<BadCase> cases = {
      {{{"x", x}, {"y", x}}, {}, "'y'"},
      {{{"mask", Spec(DType::kBool, {2, 5})}}, {}, "missing input 'x'"},
      {{{"x", Spec(DType::kI32, {2, 5, 3})}}, {}, "input 'x': expected dtype f32, f16 or bf16"},
      {{{"x", Spec(DType::kF32, {10, 3})}}, {}, "input 'x': expected rank 3"},
      {{{"x", Spec(DType::kF32, {1, 2, 5, 3})}}, {}, "input 'x': expected rank 3"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {2, 4})}}, {}, "input 'mask': expected shape"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {10})}}, {}, "input 'mask': expected shape"},
      {{{"x", x}, {"mask", Spec(DType::kF32, {2, 5})}}, {}, "input 'mask': expected dtype"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {2, 2})}},
       {},
       "input 'cu_seqlens': expected rank 1"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kI32, {0})}},
       {},
       "input 'cu_seqlens': expected rank 1"},
      {{{"x", Spec(DType::kF32, {9, 3})}, {"cu_seqlens", Spec(DType::kF32, {3})}},
       {},
       "input 'cu_seqlens': expected dtype i32 or i64"},
      {{{"x", x}, {"cu_seqlens", Spec(DType::kI32, {3})}}, {}, "input 'x': with cu_seqlens"},
      {{{"x", Spec(DType::kF32, {9})}, {"cu_seqlens", Spec(DType::kI32, {3})}},
       {},
       "input 'x': with cu_seqlens"},
      {{{"x", x}, {"mask", Spec(DType::kBool, {2, 5})}, {"cu_seqlens", Spec(DType::kI32, {3})}},
       {},
       "'mask' and 'cu_seqlens'"},
      {{{"x", x}}, {{"chunk_size", int64_t{0}}}, "'chunk_size'"},
      {{{"x", x}}, {{"chunk_size", int64_t{-4}}}, "'chunk_size'"},
      {{{"x", x}}, {{"chunk_size", true}}, "'chunk_size'"},
      {{{"x", x}}, {{"chunk", int64_t{4}}}, "unknown attribute 'chunk'"}};
  for (const BadCase& c : cases) {
    const absl::Status status = kernel.Validate(c.inputs, c.attrs);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.substring;
    EXPECT_THAT(status.message(), HasSubstr(c.substring));
  }
}

TEST(MeanPoolingKernelTest, ValidateDataChecksOffsets) {
  MeanPoolingKernel kernel;
  const Tensor x = RandomTensor(DType::kF32, {9, 3}, 1);
  for (const std::vector<int64_t>& cu :
       std::vector<std::vector<int64_t>>{{1, 4, 9}, {0, 5, 4}, {0, 4, 10}}) {
    for (DType dtype : {DType::kI32, DType::kI64}) {
      const TensorMap inputs = {{"x", x}, {"cu_seqlens", Tensor::FromInts(dtype, {3}, cu)}};
      ASSERT_TRUE(kernel.Validate(SpecsOf(inputs), {}).ok());
      const absl::Status status = kernel.ValidateData(inputs, {});
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << cu[0] << cu[1] << cu[2];
      EXPECT_THAT(status.message(), HasSubstr("cu_seqlens"));
    }
  }
  const TensorMap good = {{"x", x}, {"cu_seqlens", Tensor::FromInts(DType::kI32, {3}, {0, 0, 9})}};
  EXPECT_TRUE(kernel.ValidateData(good, {}).ok());
  EXPECT_TRUE(kernel.ValidateData({{"x", RandomTensor(DType::kF32, {2, 4, 3}, 2)}}, {}).ok());
}

TEST(MeanPoolingKernelTest, OutputSpecs) {
  MeanPoolingKernel kernel;
  EXPECT_EQ(kernel.OutputSpecs({{"x", Spec(DType::kBF16, {3, 7, 17})}}, {}),
            (TensorSpecMap{{"out", Spec(DType::kBF16, {3, 17})}}));
  EXPECT_EQ(kernel.OutputSpecs(
                {{"x", Spec(DType::kF16, {1, 20, 5})}, {"cu_seqlens", Spec(DType::kI64, {4})}}, {}),
            (TensorSpecMap{{"out", Spec(DType::kF16, {3, 5})}}));
}

TEST(MeanPoolingKernelTest, CpuRunMatchesReferenceInEveryForm) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingKernel();
  uint64_t seed = 10;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const double tolerance = dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 5e-3 : 1e-2;
    SCOPED_TRACE(DTypeName(dtype));
    // Dense [3,7,17].
    const Tensor x = RandomTensor(dtype, {3, 7, 17}, seed++);
    absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, {}, KernelConfig{});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->spec(), Spec(dtype, {3, 17}));
    EXPECT_LT(RelativeError(out->ToDoubles(), Reference(x, {0, 7, 14, 21}, {})), tolerance);
    // Masked, with each mask dtype.
    for (DType mask_dtype : {DType::kBool, DType::kI32, DType::kI64}) {
      std::vector<int64_t> keep = RandomTensor(DType::kBool, {21}, seed++).ToInts();
      std::fill(keep.begin() + 7, keep.begin() + 14, 0);  // sequence 1 fully masked
      if (mask_dtype != DType::kBool) keep[0] = 5;        // any nonzero value counts
      const Tensor mask = Tensor::FromInts(mask_dtype, {3, 7}, keep);
      out = RunCpu(*kernel, {{"x", x}, {"mask", mask}}, {}, KernelConfig{});
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_LT(RelativeError(out->ToDoubles(), Reference(x, {0, 7, 14, 21}, keep)), tolerance);
      for (int64_t h = 17; h < 34; ++h) EXPECT_EQ(out->GetFloat(h), 0.0f);
    }
    // Varlen [T,H] and [1,T,H] with I32 and I64 offsets, a zero-length sequence included.
    const std::vector<int64_t> cu = {0, 3, 3, 40, 129};
    const Tensor packed = RandomTensor(dtype, {130, 9}, seed++);
    for (DType cu_dtype : {DType::kI32, DType::kI64}) {
      for (bool leading_one : {false, true}) {
        Tensor xs = packed;
        if (leading_one) xs = *Tensor::FromBytes(dtype, {1, 130, 9}, packed.bytes());
        out = RunCpu(*kernel, {{"x", xs}, {"cu_seqlens", Tensor::FromInts(cu_dtype, {5}, cu)}}, {},
                     KernelConfig{});
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(out->shape(), (Shape{4, 9}));
        EXPECT_LT(RelativeError(out->ToDoubles(), Reference(packed, cu, {})), tolerance);
        for (int64_t h = 9; h < 18; ++h) EXPECT_EQ(out->GetFloat(h), 0.0f);
      }
    }
  }
}

TEST(MeanPoolingKernelTest, ChunkSizeAttributeAndConfigsKeepTheBits) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingKernel();
  const Tensor x = RandomTensor(DType::kF32, {2, 300, 33}, 40);
  absl::StatusOr<Tensor> baseline = RunCpu(*kernel, {{"x", x}}, {}, KernelConfig{});
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  for (int64_t chunk : {1, 5, 64, 1000}) {
    const Attributes attrs = {{"chunk_size", chunk}};
    for (const KernelConfig& config :
         kernel->CandidateConfigs(SpecsOf({{"x", x}}), attrs, CpuDevice(4))) {
      SCOPED_TRACE(config.DebugString());
      absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, attrs, config);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->bytes(), baseline->bytes());
    }
    absl::StatusOr<Tensor> out = RunCpu(*kernel, {{"x", x}}, attrs, KernelConfig{});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->bytes(), baseline->bytes());
  }
}

TEST(MeanPoolingKernelTest, RunRejectsForeignConfigsAndEarlyFetch) {
  std::unique_ptr<Kernel> kernel = MakeMeanPoolingKernel();
  const TensorMap inputs = {{"x", RandomTensor(DType::kF32, {2, 3, 4}, 5)}};
  PlatformImpl* impl = kernel->impl(Platform::kCpu);
  absl::StatusOr<std::unique_ptr<PreparedRun>> run = impl->Prepare(inputs, {}, CpuDevice(2));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ((*run)->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig cuda;
  cuda.platform = "cuda";
  EXPECT_FALSE(impl->Supports(cuda, SpecsOf(inputs), CpuDevice(2)));
  EXPECT_EQ((*run)->Launch(cuda).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(impl->Prepare({{"x", RandomTensor(DType::kI32, {2, 3, 4}, 5)}}, {}, CpuDevice(2))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MeanPoolingKernelTest, CpuHeuristicIsAPureCandidate) {
  MeanPoolingKernel kernel;
  const std::vector<TensorSpecMap> shapes = {
      {{"x", Spec(DType::kF32, {1, 1, 1})}},
      {{"x", Spec(DType::kBF16, {64, 512, 1024})}},
      {{"x", Spec(DType::kF16, {100000, 64})}, {"cu_seqlens", Spec(DType::kI32, {11})}},
      {{"x", Spec(DType::kF32, {8, 4096, 256})}, {"mask", Spec(DType::kBool, {8, 4096})}}};
  for (const TensorSpecMap& inputs : shapes) {
    for (int threads : {1, 2, 16}) {
      for (int64_t chunk : {1, 32, 777}) {
        const Attributes attrs = {{"chunk_size", chunk}};
        const KernelConfig heuristic = kernel.HeuristicConfig(inputs, attrs, CpuDevice(threads));
        SCOPED_TRACE(heuristic.DebugString());
        EXPECT_EQ(heuristic, kernel.HeuristicConfig(inputs, attrs, CpuDevice(threads)));
        EXPECT_EQ(heuristic.platform, "cpu");
        EXPECT_EQ(heuristic.block_size, chunk);
        EXPECT_TRUE(kernel.IsCandidate(heuristic, inputs, attrs, CpuDevice(threads)));
        const std::vector<KernelConfig> candidates =
            kernel.CandidateConfigs(inputs, attrs, CpuDevice(threads));
        std::set<std::string> distinct;
        for (const KernelConfig& c : candidates) {
          EXPECT_EQ(c.platform, "cpu");
          EXPECT_GT(c.block_size, 0);
          EXPECT_GE(c.num_warps, 1);
          EXPECT_LE(c.num_warps, std::max(threads, 2));
          distinct.insert(c.ToJson());
        }
        EXPECT_EQ(distinct.size(), candidates.size());
      }
    }
  }
  // Small inputs stay on one thread; large ones use every hardware thread.
  EXPECT_EQ(kernel.HeuristicConfig(shapes[0], {}, CpuDevice(16)).num_warps, 1);
  EXPECT_EQ(kernel.HeuristicConfig(shapes[1], {}, CpuDevice(16)).num_warps, 16);
}

TEST(MeanPoolingKernelTest, CudaConfigsComeFromTheCudaConfigSpace) {
  MeanPoolingKernel kernel;
  DeviceInfo gpu;
  gpu.platform = Platform::kCuda;
  gpu.ordinal = 0;
  gpu.fingerprint.sm_count = 132;
  const TensorSpecMap varlen = {{"x", Spec(DType::kBF16, {1, 5000, 768})},
                                {"cu_seqlens", Spec(DType::kI64, {9})}};
  cuda::MeanPoolingShape shape;
  shape.form = cuda::MeanPoolingShape::Form::kVarlen;
  shape.dtype = DType::kBF16;
  shape.num_sequences = 8;
  shape.total_rows = 5000;
  shape.hidden = 768;
  EXPECT_EQ(kernel.HeuristicConfig(varlen, {}, gpu), cuda::MeanPoolingHeuristic(shape, gpu));
  EXPECT_EQ(kernel.CandidateConfigs(varlen, {}, gpu), cuda::MeanPoolingCandidates(shape, gpu));

  const TensorSpecMap masked = {{"x", Spec(DType::kF32, {4, 300, 50})},
                                {"mask", Spec(DType::kI32, {4, 300})}};
  shape = cuda::MeanPoolingShape{};
  shape.form = cuda::MeanPoolingShape::Form::kMasked;
  shape.num_sequences = 4;
  shape.total_rows = 1200;
  shape.hidden = 50;
  EXPECT_EQ(kernel.HeuristicConfig(masked, {}, gpu), cuda::MeanPoolingHeuristic(shape, gpu));
  EXPECT_EQ(kernel.CandidateConfigs(masked, {}, gpu), cuda::MeanPoolingCandidates(shape, gpu));
}

}  // namespace
}  // namespace kernelserve
