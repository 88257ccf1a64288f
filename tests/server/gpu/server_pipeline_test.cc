// The GPU pipeline of kernelserve-server, as a real process on a real GPU: many concurrent calls
// of mixed sizes and kernels through the lanes of one GPU, each checked against the CPU
// reference, with a cancelled and an expired call among them; an out-of-memory call in the
// middle of others; the pinned pool at its limit. Skips where the server sees no GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

// A server on the GPU with `args` added; skips the test without a GPU.
#define START_GPU_SERVER(server, ...)                                \
  ServerProcess server;                                              \
  {                                                                  \
    std::vector<std::string> args = {"--cache=memory", __VA_ARGS__}; \
    ASSERT_TRUE(server.Start(args).ok());                            \
    if (!absl::StrContains(server.startup_line(), "cuda:0")) {       \
      GTEST_SKIP() << "no GPU: " << server.startup_line();           \
    }                                                                \
  }

// Relative error allowed for outputs of `dtype` (the kernels' own tests use the same).
double Tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : (dtype == DType::kBF16 ? 1e-2 : 5e-3);
}

absl::StatusOr<Tensor> Output(v1::ExecuteResponse& response) {
  auto it = response.mutable_outputs()->find("out");
  if (it == response.mutable_outputs()->end()) return absl::NotFoundError("no out");
  return TakeTensor(&it->second, "out");
}

// One call of a random kernel and shape, and how to check its answer.
struct Case {
  std::string label;
  v1::ExecuteRequest request;
  Tensor reference;  // mean_pooling: in double precision; attention: from the cpu platform
  DType dtype = DType::kF32;
};

// mean_pooling of random x of `dtype` and `shape` [B,S,H] on the GPU, against double precision.
Case PoolingOf(DType dtype, const Shape& shape, uint64_t seed) {
  const Tensor x = RandomTensor(dtype, shape, seed, -1.0f, 1.0f);
  Case c;
  c.label = absl::StrCat("mean_pooling ", x.spec().DebugString());
  c.request = MeanPoolingRequest(x);
  c.request.set_platform("cuda");
  const std::vector<double> ref = MeanPoolingReference(x);
  std::vector<float> values(ref.begin(), ref.end());
  c.reference = Tensor::FromFloats(DType::kF32, {shape[0], shape[2]}, values);
  c.dtype = dtype;
  return c;
}

// Up to about 40 MB: small calls and large ones that take the pinned pool.
Case PoolingCase(std::mt19937_64& rng, uint64_t seed) {
  const DType dtype = (rng() % 2 == 0) ? DType::kF32 : DType::kF16;
  const int64_t b = 1 + static_cast<int64_t>(rng() % 8);
  const int64_t s = 1 + static_cast<int64_t>(rng() % 2500);
  const int64_t h = 64 + static_cast<int64_t>(rng() % 1000);
  return PoolingOf(dtype, {b, s, h}, seed);
}

// An attention call (small enough for the cpu platform to answer it quickly) and its cpu
// answer from the same server.
absl::StatusOr<Case> AttentionCase(v1::KernelService::Stub& stub, std::mt19937_64& rng,
                                   uint64_t seed) {
  const DType dtype = (rng() % 2 == 0) ? DType::kF16 : DType::kBF16;
  const int64_t b = 1 + static_cast<int64_t>(rng() % 2);
  const int64_t s = 1 + static_cast<int64_t>(rng() % 300);
  const int64_t d = (rng() % 2 == 0) ? 64 : 128;
  Case c;
  c.request.set_kernel("flash_attention");
  int i = 0;
  for (const char* name : {"q", "k", "v"}) {
    (*c.request.mutable_inputs())[name] = ToWire(RandomTensor(dtype, {b, s, 4, d}, seed + i++));
  }
  const bool causal = rng() % 2 == 0;
  c.request.mutable_flash_attention()->set_causal(causal);
  c.label = absl::StrCat("flash_attention ", Sv(DTypeName(dtype)), " [", b, ",", s, ",4,", d,
                         "] causal=", causal);
  c.dtype = dtype;
  v1::ExecuteRequest on_cpu = c.request;
  on_cpu.set_platform("cpu");
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub.Execute(&context, on_cpu, &response);
  if (!status.ok()) return absl::InternalError("cpu reference: " + status.error_message());
  KS_ASSIGN_OR_RETURN(c.reference, Output(response));
  c.request.set_platform("cuda");
  return c;
}

// Runs `c` and checks the answer; failures name the case.
void RunAndCheck(v1::KernelService::Stub& stub, Case& c) {
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const grpc::Status status = stub.Execute(&context, c.request, &response);
  ASSERT_TRUE(status.ok()) << c.label << ": " << status.error_message();
  // The cuda platform runs cuDNN's plans too (where cuDNN is loaded): the answer names which.
  EXPECT_TRUE(response.platform() == "cuda" || response.platform() == "cudnn")
      << c.label << ": " << response.platform();
  absl::StatusOr<Tensor> out = Output(response);
  ASSERT_TRUE(out.ok()) << c.label << ": " << out.status();
  ASSERT_EQ(out->shape(), c.reference.shape()) << c.label;
  EXPECT_LE(RelativeError(*out, c.reference), Tolerance(c.dtype)) << c.label;
}

// A large call whose client gives up: a deadline of 1 ms, or a cancel 5 ms after the start.
grpc::StatusCode LargeCallGivenUp(v1::KernelService::Stub& stub, bool cancel) {
  v1::ExecuteRequest request =
      MeanPoolingRequest(RandomTensor(DType::kF16, {16, 2048, 4096}, 77, -1.0f, 1.0f));
  request.set_platform("cuda");
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  if (!cancel)
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
  std::thread canceller;
  if (cancel) {
    canceller = std::thread([&context] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      context.TryCancel();
    });
  }
  const grpc::Status status = stub.Execute(&context, request, &response);
  if (canceller.joinable()) canceller.join();
  return status.error_code();
}

TEST(ServerPipelineTest, ConcurrentMixedCallsMatchTheCpuReferenceWithCancelsAmongThem) {
  START_GPU_SERVER(server, "--gpu-lanes=3", "--metrics-listen=127.0.0.1:0");
  constexpr int kThreads = 12;
  constexpr int kCallsPerThread = 6;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = MakeStub(server.address());
      std::mt19937_64 rng(1000 + t);
      for (int i = 0; i < kCallsPerThread; ++i) {
        const uint64_t seed = 100000 * (t + 1) + 10 * i;
        if (rng() % 3 == 0) {
          absl::StatusOr<Case> c = AttentionCase(*stub, rng, seed);
          ASSERT_TRUE(c.ok()) << c.status();
          RunAndCheck(*stub, *c);
        } else {
          Case c = PoolingCase(rng, seed);
          RunAndCheck(*stub, c);
        }
        ++done;
      }
    });
  }
  // In the middle of the load: one call expires, one is cancelled.
  auto stub = MakeStub(server.address());
  EXPECT_EQ(LargeCallGivenUp(*stub, /*cancel=*/false), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(LargeCallGivenUp(*stub, /*cancel=*/true), grpc::StatusCode::CANCELLED);
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(done.load(), kThreads * kCallsPerThread);

  // The server goes on: a last call, and the queue drained.
  std::mt19937_64 rng(5);
  Case last = PoolingCase(rng, 99);
  RunAndCheck(*stub, last);
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_queue_depth", {"device=\"cuda:0\""}), 0.0);
  EXPECT_GE(MetricSum(*metrics, "kernelserve_requests_total", {"code=\"OK\""}),
            kThreads * kCallsPerThread + 1);
}

// Tuning on a miss with several lanes: concurrent calls of one new key (one tunes with the GPU
// to itself, the others wait for its result) and of other keys all finish, correct.
TEST(ServerPipelineTest, ConcurrentTuningOnAMissFinishesAndMatches) {
  START_GPU_SERVER(server, "--gpu-lanes=3", "--autotune", "--metrics-listen=off");
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto stub = MakeStub(server.address());
      // Threads 0-3 share one key; 4 and 5 have keys of their own.
      const Shape shape = t < 4 ? Shape{3, 333, 200} : Shape{2, 100 + t, 96};
      for (int i = 0; i < 2; ++i) {
        Case c = PoolingOf(DType::kF32, shape, 7000 + 10 * t + i);
        RunAndCheck(*stub, c);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Device memory held by this process until destroyed, leaving about `leave` bytes free.
class DeviceMemoryHog {
 public:
  explicit DeviceMemoryHog(size_t leave) {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || free_bytes <= leave) return;
    if (cudaMalloc(&ptr_, free_bytes - leave) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceMemoryHog() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  bool ok() const { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
};

TEST(ServerPipelineTest, OutOfDeviceMemoryFailsThatCallAloneAndTheNextOneRuns) {
  START_GPU_SERVER(server, "--gpu-lanes=3", "--metrics-listen=off");
  auto stub = MakeStub(server.address());
  std::mt19937_64 rng(9);
  Case warm = PoolingCase(rng, 1);  // the server's context and pools exist before the hog
  RunAndCheck(*stub, warm);

  // Attention on [1,32768,16,128] f16 needs 4 x 128 MiB on the device; leave 256 MiB.
  v1::ExecuteRequest big;
  big.set_kernel("flash_attention");
  big.set_platform("cuda");
  int i = 0;
  for (const char* name : {"q", "k", "v"}) {
    (*big.mutable_inputs())[name] =
        ToWire(RandomTensor(DType::kF16, {1, 32768, 16, 128}, 500 + i++, -1.0f, 1.0f));
  }
  {
    DeviceMemoryHog hog(size_t{256} << 20);
    ASSERT_TRUE(hog.ok());
    std::atomic<bool> stop{false};
    std::thread others([&] {  // small calls keep running on the other lanes meanwhile
      auto own = MakeStub(server.address());
      for (int n = 0; !stop || n < 4; ++n) {
        Case c = PoolingOf(DType::kF16, {2, 100, 256}, 2000 + n);
        RunAndCheck(*own, c);
      }
    });
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Execute(&context, big, &response);
    stop = true;
    others.join();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), "memory")) << status.error_message();
  }
  // With the memory back, the same call runs.
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->Execute(&context, big, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.outputs().at("out").data().size(), size_t{32768} * 16 * 128 * 2);
}

TEST(ServerPipelineTest, PinnedPoolAtItsLimitFallsBackAndStaysWithinIt) {
  constexpr int64_t kLimit = int64_t{32} << 20;
  START_GPU_SERVER(server, "--gpu-lanes=3", "--metrics-listen=127.0.0.1:0",
                   absl::StrCat("--max-pinned-bytes=", kLimit));
  // Eight 24 MiB calls at once: the pool holds one of their inputs at a time (with room for
  // two, the calls of this fast GPU seldom overlapped three deep, and nothing was refused).
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto stub = MakeStub(server.address());
      for (int i = 0; i < 3; ++i) {
        Case c = PoolingOf(DType::kF32, {6, 1024, 1024}, 300 + 10 * t + i);
        RunAndCheck(*stub, c);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a sample of the pool
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(MetricSum(*metrics, "kernelserve_pinned_host_refusals_total"), 0.0);
  const double held = MetricSum(*metrics, "kernelserve_pinned_host_bytes");
  EXPECT_GT(held, 0.0);
  EXPECT_LE(held, static_cast<double>(kLimit));
}

}  // namespace
}  // namespace kernelserve::testing
