// The CUDA platform's page-locked path: inputs that live in the pinned pool go up in one DMA,
// outputs come down into the pool, and the results are those of the staged path and the CPU
// reference. Skips where no GPU is visible.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "tests/kernels/runtime/cuda/cuda_test_util.h"

namespace kernelserve::cuda::testing {
namespace {

// `tensor` copied into a buffer of the pinned pool. REQUIRES: the pool has room.
absl::StatusOr<Tensor> Pinned(const Tensor& tensor) {
  std::shared_ptr<HostBuffer> buffer = PinnedHostPool()->TryAllocate(tensor.nbytes());
  if (buffer == nullptr) return absl::ResourceExhaustedError("no room in the pinned pool");
  std::memcpy(buffer->data(), tensor.data(), tensor.nbytes());
  return Tensor::FromBuffer(tensor.dtype(), tensor.shape(), std::move(buffer));
}

TEST_F(GpuTest, PinnedInputsAndOutputsMatchTheReferenceAndTheStagedPath) {
  // Inputs from 1.5 MiB (above the pool's 1 MiB minimum) past the staging halves (16 MiB),
  // odd dims.
  const std::vector<Shape> shapes = {{3, 257, 1000}, {2, 4099, 1031}, {5, 777, 4097}};
  uint64_t seed = 900;
  for (const Shape& shape : shapes) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const Tensor x = RandomX(dtype, shape, ++seed);
      const std::string where = TensorSpec{dtype, shape}.DebugString();
      absl::StatusOr<Tensor> pinned_x = Pinned(x);
      ASSERT_TRUE(pinned_x.ok()) << pinned_x.status();
      ASSERT_TRUE(pinned_x->buffer()->pinned());
      const TensorMap staged_inputs = {{"x", x}};
      const TensorMap pinned_inputs = {{"x", *std::move(pinned_x)}};
      absl::StatusOr<Tensor> want = Reference(staged_inputs);
      ASSERT_TRUE(want.ok()) << want.status();
      const KernelConfig config = Heuristic(staged_inputs);

      auto staged_run = Prepare(staged_inputs, gpu());
      auto pinned_run = Prepare(pinned_inputs, gpu());
      ASSERT_TRUE(staged_run.ok() && pinned_run.ok()) << staged_run.status() << pinned_run.status();
      absl::StatusOr<Tensor> staged = LaunchPoisoned(**staged_run, config);
      absl::StatusOr<Tensor> pinned = LaunchPoisoned(**pinned_run, config);
      ASSERT_TRUE(staged.ok() && pinned.ok()) << staged.status() << pinned.status();
      ExpectMatches(*pinned, *want, where);
      EXPECT_EQ(pinned->bytes(), staged->bytes()) << where << ": same kernel, same bits";
      if (pinned->nbytes() >= (size_t{1} << 20)) {
        ASSERT_NE(pinned->buffer(), nullptr) << where << ": a large output lands in the pool";
        EXPECT_TRUE(pinned->buffer()->pinned());
      }
    }
  }
}

TEST_F(GpuTest, ThreadsShareThePinnedPool) {
  const Tensor x = RandomX(DType::kF16, {4, 1000, 1024}, 950);
  absl::StatusOr<Tensor> want = Reference({{"x", x}});
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<std::thread> threads;
  std::vector<std::string> failures(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        absl::StatusOr<Tensor> pinned_x = Pinned(x);
        if (!pinned_x.ok()) {
          failures[t] = pinned_x.status().ToString();
          return;
        }
        const TensorMap inputs = {{"x", *std::move(pinned_x)}};
        auto run = Prepare(inputs, gpu());
        absl::StatusOr<Tensor> got =
            run.ok() ? LaunchPoisoned(**run, Heuristic(inputs)) : run.status();
        if (!got.ok()) {
          failures[t] = got.status().ToString();
          return;
        }
        if (AllClose(*got, *want, 1.0 / 1024, 1e-6).ok == false) {
          failures[t] = "mismatch";
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  const HostPoolStats stats = PinnedHostPool()->stats();
  EXPECT_GT(stats.hits, 0) << "released blocks are reused";
}

}  // namespace
}  // namespace kernelserve::cuda::testing
