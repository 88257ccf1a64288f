// Config choice of the CUDA mean pooling kernel, the dispatch to compiled instances and the
// CUDA status adapter. None of these needs a GPU: they run in CI.
#include "kernels/mean_pooling/cuda/mean_pooling_config.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/mean_pooling/cuda/mean_pooling_dispatch.h"
#include "kernels/mean_pooling/cuda/mean_pooling_space.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve::cuda {
namespace {

using ::testing::HasSubstr;

DeviceInfo Gpu(int sm_count) {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  device.fingerprint.kind = "gpu";
  device.fingerprint.sm_count = sm_count;
  return device;
}

std::vector<MeanPoolingShape> Shapes() {
  std::vector<MeanPoolingShape> shapes;
  for (auto form : {PoolingForm::kDense, PoolingForm::kMasked, PoolingForm::kVarlen}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t hidden : {0, 1, 17, 1000, 1024, 4096, 8191, 65536}) {
        for (int64_t rows : {0, 1, 7, 129, 65536, 524288, 100000000}) {
          shapes.push_back({form, dtype, /*num_sequences=*/3, rows, hidden});
        }
      }
    }
  }
  return shapes;
}

TEST(MeanPoolingConfigTest, CompiledConfigsAreDistinctAndInTheSpace) {
  const std::vector<KernelConfig>& configs = MeanPoolingCompiledConfigs();
  ASSERT_FALSE(configs.empty());
  std::set<std::string> seen;
  for (const KernelConfig& config : configs) {
    EXPECT_TRUE(IsPoolingConfigCompiled(config)) << config.DebugString();
    EXPECT_EQ(config.platform, "cuda");
    EXPECT_TRUE(seen.insert(config.ToJson()).second) << "duplicate " << config.DebugString();
  }
  // (8 lane counts fit 4 warps, 9 fit 8 warps) x 2 stage counts x 8 chunk sizes.
  EXPECT_EQ(configs.size(), (8u + 9u) * 2u * 8u);
}

TEST(MeanPoolingConfigTest, EveryCompiledConfigHasAnInstanceForEveryInput) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (PoolingForm form : {PoolingForm::kDense, PoolingForm::kMasked, PoolingForm::kVarlen}) {
      // Hidden sizes that give the vector path and the single-value path.
      for (int64_t hidden : {1, 17, 1000, 4096}) {
        const int vec = PoolVectorWidth(static_cast<int64_t>(ItemSize(dtype)), hidden);
        for (const KernelConfig& config : MeanPoolingCompiledConfigs()) {
          EXPECT_TRUE(SelectPoolingLaunch(dtype, form, vec, config.num_stages).ok())
              << config.DebugString() << " dtype " << DTypeName(dtype) << " H " << hidden;
        }
      }
    }
  }
}

TEST(MeanPoolingConfigTest, HeuristicIsACandidateAndCandidatesAreCompiled) {
  const std::vector<KernelConfig>& compiled = MeanPoolingCompiledConfigs();
  for (int sms : {0, 1, 114, 132}) {
    for (const MeanPoolingShape& shape : Shapes()) {
      const KernelConfig heuristic = MeanPoolingHeuristic(shape, Gpu(sms));
      EXPECT_EQ(heuristic, MeanPoolingHeuristic(shape, Gpu(sms)));  // a pure function
      const std::vector<KernelConfig> candidates = MeanPoolingCandidates(shape, Gpu(sms));
      ASSERT_FALSE(candidates.empty());
      EXPECT_EQ(candidates.front(), heuristic);
      for (const KernelConfig& c : candidates) {
        EXPECT_NE(std::find(compiled.begin(), compiled.end(), c), compiled.end())
            << c.DebugString();
        EXPECT_EQ(std::count(candidates.begin(), candidates.end(), c), 1) << c.DebugString();
      }
    }
  }
}

TEST(MeanPoolingConfigTest, HeuristicLanesCoverTheRowWithoutIdleLanes) {
  // bf16 H=4096: 512 vectors of 8 values -> 64 lanes; H=17 (no 16-byte rows) -> 32 lanes of
  // one value; H=1 -> one lane.
  const MeanPoolingShape wide{PoolingForm::kDense, DType::kBF16, 32, 65536, 4096};
  EXPECT_EQ(MeanPoolingHeuristic(wide, Gpu(132)).Named("lanes"), 64);
  const MeanPoolingShape odd{PoolingForm::kDense, DType::kF32, 3, 21, 17};
  EXPECT_EQ(MeanPoolingHeuristic(odd, Gpu(132)).Named("lanes"), 32);
  const MeanPoolingShape one{PoolingForm::kVarlen, DType::kF16, 3, 100, 1};
  EXPECT_EQ(MeanPoolingHeuristic(one, Gpu(132)).Named("lanes"), 1);
}

// The lanes are the named field "lanes"; block_d (their field before config schema 2) is
// refused, naming it.
TEST(MeanPoolingConfigTest, SchemaNamesTheLanesField) {
  const ConfigSchema& schema = MeanPoolingCudaConfigSchema();
  EXPECT_EQ(schema.FieldNames(), "num_warps, lanes, num_stages, block_size");
  for (const KernelConfig& config : MeanPoolingCompiledConfigs()) {
    EXPECT_TRUE(schema.Check(config, "mean_pooling on cuda").ok()) << config.DebugString();
  }
  KernelConfig old = MeanPoolingCompiledConfigs().front();
  old.named.clear();
  old.block_d = 64;
  EXPECT_EQ(schema.Check(old, "mean_pooling on cuda").message(),
            "config block_d=64: block_d is not a field of mean_pooling on cuda; the field for "
            "mean_pooling's lanes on cuda (threads side by side along H) is 'lanes' (1..256)");
  EXPECT_FALSE(IsPoolingConfigCompiled(old));
}

TEST(MeanPoolingConfigTest, HeuristicSplitsLongSequencesToFillTheChip) {
  const MeanPoolingShape shape{PoolingForm::kDense, DType::kBF16, 32, 32 * 2048, 4096};
  const KernelConfig config = MeanPoolingHeuristic(shape, Gpu(132));
  const int64_t tiles = 4096 / 8 / config.Named("lanes");
  const int64_t blocks = PoolCeilDiv(shape.total_rows, config.block_size) * tiles;
  EXPECT_GE(blocks, 132 * 7);
  EXPECT_LT(blocks, 132 * 7 * 2);      // the largest chunk that still fills the chip
  EXPECT_LT(config.block_size, 2048);  // each sequence is split over several blocks
  // A small problem gets the smallest chunk that still gives each thread a full round.
  const MeanPoolingShape tiny{PoolingForm::kDense, DType::kF32, 1, 7, 1000};
  const KernelConfig small = MeanPoolingHeuristic(tiny, Gpu(132));
  const int round =
      static_cast<int>(small.num_warps * 32 / small.Named("lanes") * small.num_stages);
  EXPECT_EQ(small.block_size, *std::find_if(kPoolBlockRows.begin(), kPoolBlockRows.end(),
                                            [&](int rows) { return rows >= round; }));
}

// The CUDA platform's heuristic, candidates and checks on analysed problems: its configs come
// from the CUDA config space, and the heuristic passes its own checks.
TEST(MeanPoolingConfigTest, CudaPlatformConfigsComeFromTheConfigSpace) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  const PlatformImpl& cuda = *kernel->impl(Platform::kCuda);
  const std::vector<TensorSpecMap> inputs = {
      {{"x", {DType::kBF16, {32, 2048, 4096}}}},
      {{"x", {DType::kF32, {3, 7, 17}}}, {"mask", {DType::kBool, {3, 7}}}},
      {{"x", {DType::kF16, {1, 129, 1}}}, {"cu_seqlens", {DType::kI32, {4}}}},
      {{"x", {DType::kF16, {129, 1000}}}, {"cu_seqlens", {DType::kI64, {2}}}}};
  for (const TensorSpecMap& specs : inputs) {
    auto problem = kernel->Analyze(specs, {});
    ASSERT_TRUE(problem.ok()) << problem.status();
    ASSERT_TRUE(cuda.Supports(**problem, Gpu(132)).ok());
    const KernelConfig config = cuda.Heuristic(**problem, Gpu(132));
    EXPECT_TRUE(cuda.IsCandidate(config, **problem, Gpu(132))) << config.DebugString();
    EXPECT_TRUE(cuda.CheckConfig(config, **problem, Gpu(132)).ok()) << config.DebugString();
  }
  const TensorSpecMap varlen = {{"x", {DType::kBF16, {1, 5000, 768}}},
                                {"cu_seqlens", {DType::kI64, {9}}}};
  const MeanPoolingShape shape = {PoolingForm::kVarlen, DType::kBF16, 8, 5000, 768};
  auto problem = kernel->Analyze(varlen, {});
  ASSERT_TRUE(problem.ok());
  EXPECT_EQ(cuda.Heuristic(**problem, Gpu(132)), MeanPoolingHeuristic(shape, Gpu(132)));
  EXPECT_EQ(cuda.Candidates(**problem, Gpu(132)), MeanPoolingCandidates(shape, Gpu(132)));
}

TEST(MeanPoolingConfigTest, CudaPlatformRejectsConfigsOutsideTheSpace) {
  std::unique_ptr<Kernel> kernel = MakeMeanPooling();
  const PlatformImpl& cuda = *kernel->impl(Platform::kCuda);
  auto problem = kernel->Analyze({{"x", {DType::kF32, {3, 7, 17}}}}, {});
  ASSERT_TRUE(problem.ok());
  KernelConfig config = MeanPoolingCompiledConfigs().front();
  EXPECT_TRUE(cuda.CheckConfig(config, **problem, Gpu(132)).ok());
  DeviceInfo cpu;
  EXPECT_FALSE(cuda.Supports(**problem, cpu).ok());
  config.num_stages = 3;  // below the schema's range (4..8)
  EXPECT_THAT(cuda.CheckConfig(config, **problem, Gpu(132)).message(),
              HasSubstr("config num_stages=3 is out of range for mean_pooling on cuda"));
  config.num_stages = 5;  // in range, not compiled
  EXPECT_THAT(cuda.CheckConfig(config, **problem, Gpu(132)).message(),
              HasSubstr("num_stages=5: expected one of"));
  config = MeanPoolingCompiledConfigs().front();
  config.block_size = 1 << 30;
  EXPECT_THAT(cuda.CheckConfig(config, **problem, Gpu(132)).message(),
              HasSubstr("block_size=1073741824"));
}

TEST(MeanPoolingConfigTest, DispatchWithoutAnInstanceIsUnimplemented) {
  absl::StatusOr<PoolingLaunchFn> fn = SelectPoolingLaunch(DType::kF32, PoolingForm::kDense, 4, 3);
  EXPECT_EQ(fn.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(fn.status().message()), HasSubstr("num_stages 3"));
  EXPECT_EQ(SelectPoolingLaunch(DType::kI32, PoolingForm::kDense, 4, 4).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(SelectPoolingLaunch(DType::kBF16, PoolingForm::kVarlen, 2, 8).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(SelectPoolingLaunch(DType::kBF16, PoolingForm::kVarlen, 8, 8).ok());
}

TEST(CudaStatusTest, NamesTheErrorAndMapsTheCode) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "anything").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMallocAsync(x)");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(oom.message()), HasSubstr("cudaMallocAsync(x)"));
  EXPECT_THAT(std::string(oom.message()), HasSubstr("cudaErrorMemoryAllocation"));
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "count").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidValue, "args").code(), absl::StatusCode::kInvalidArgument);
  const absl::Status fault = CudaStatus(cudaErrorIllegalAddress, "kernel");
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(fault.message()), HasSubstr("cudaErrorIllegalAddress"));
}

TEST(CudaDevicesTest, EnumerationAndMemoryInfoAgree) {
  const std::vector<DeviceInfo> devices = EnumerateCudaDevices();
  const auto memory = CudaMemoryInfo(static_cast<int>(devices.size()));  // one past the end
  if (devices.empty()) {
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kUnavailable) << memory.status();
    return;
  }
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument) << memory.status();
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceInfo& d = devices[i];
    EXPECT_EQ(d.platform, Platform::kCuda);
    EXPECT_EQ(d.ordinal, static_cast<int>(i));
    EXPECT_EQ(d.fingerprint.kind, "gpu");
    EXPECT_FALSE(d.fingerprint.name.empty());
    EXPECT_GT(d.fingerprint.sm_count, 0);
    EXPECT_GT(d.fingerprint.runtime_version, 0);
    EXPECT_GT(d.shared_memory_per_block_optin, 0);
    const auto info = CudaMemoryInfo(d.ordinal);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->second, d.memory_total_bytes);
    EXPECT_GT(info->first, 0);
    EXPECT_LE(info->first, info->second);
  }
}

}  // namespace
}  // namespace kernelserve::cuda
