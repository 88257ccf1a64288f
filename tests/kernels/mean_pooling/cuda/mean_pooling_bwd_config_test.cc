// The CUDA mean_pooling_bwd configs (plain C++, no GPU needed): the heuristic is a candidate,
// every candidate passes the check, and the check names what it refuses.
#include "kernels/mean_pooling/cuda/mean_pooling_bwd_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve::cuda {
namespace {

using ::testing::HasSubstr;

DeviceInfo Gpu() {
  DeviceInfo device;
  device.platform = Platform::kCuda;
  device.ordinal = 0;
  return device;
}

TEST(MeanPoolingBwdConfigTest, HeuristicIsACheckedCandidate) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t rows : {int64_t{1}, int64_t{1000}, int64_t{1} << 24}) {
      for (int64_t hidden : {1, 17, 32, 1024, 8192}) {
        const PoolingBwdShape shape{dtype, rows, hidden};
        const KernelConfig heuristic = PoolingBwdHeuristic(shape, Gpu());
        bool found = false;
        for (const KernelConfig& config : PoolingBwdCandidates(shape, Gpu())) {
          EXPECT_TRUE(CheckPoolingBwdConfig(config, shape).ok()) << config.DebugString();
          found = found || config == heuristic;
        }
        EXPECT_TRUE(found) << heuristic.DebugString() << " for " << rows << "x" << hidden;
      }
    }
  }
}

TEST(MeanPoolingBwdConfigTest, CheckNamesTheField) {
  const PoolingBwdShape shape{DType::kF16, 100, 64};
  KernelConfig config;
  config.num_warps = 8;
  config.block_size = 512;
  absl::Status status = CheckPoolingBwdConfig(config, shape);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("block_size"));
  config.block_size = 64;
  config.num_warps = 0;
  status = CheckPoolingBwdConfig(config, shape);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("num_warps"));
  config.num_warps = 8;
  config.block_q = 64;
  EXPECT_EQ(CheckPoolingBwdConfig(config, shape).code(), absl::StatusCode::kInvalidArgument);
  config.block_q = 0;
  config.platform = "cpu";
  EXPECT_EQ(CheckPoolingBwdConfig(config, shape).code(), absl::StatusCode::kInvalidArgument);
  config.platform = "cuda";
  EXPECT_TRUE(CheckPoolingBwdConfig(config, shape).ok());
}

}  // namespace
}  // namespace kernelserve::cuda
