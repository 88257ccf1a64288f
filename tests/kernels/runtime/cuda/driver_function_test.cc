// FindDriverFunction: driver calls found at run time, and a clean null where there is none.
#include "kernels/runtime/cuda/driver_function.h"

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve::cuda {
namespace {

// (Without a driver the runtime reports its absence on every call: no last-error check here.)
TEST(DriverFunctionTest, AnUnknownNameIsNull) {
  EXPECT_EQ(FindDriverFunction("cuNoSuchFunctionAnywhere", 12000), nullptr);
}

TEST(DriverFunctionTest, TheCallsTheServiceUsesAreFoundWhereThereIsADriver) {
  if (EnumerateCudaDevices().empty()) {
    GTEST_SKIP() << "no CUDA device visible (no driver or no GPU): GPU tests run on a GPU "
                    "machine, see docs/GPU.md";
  }
  EXPECT_EQ(FindDriverFunction("cuNoSuchFunctionAnywhere", 12000), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NE(FindDriverFunction("cuTensorMapEncodeTiled", 12000), nullptr);
  EXPECT_NE(FindDriverFunction("cuMemGetAddressRange", 12000), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace kernelserve::cuda
