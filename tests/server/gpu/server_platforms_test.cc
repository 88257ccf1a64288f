// Which implementation answers each platform name, through the server on a real GPU: "cuda" the
// project's own kernels, "cudnn" cuDNN's plans, "auto" (and "") the best of both, for every head
// dim and option of flash attention; every answer against the cpu platform's from the same
// server, on fresh random inputs. Skips where the server sees no GPU.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

struct Option {
  std::string label;
  bool causal = false;
  int window_left = -1;  // -1 = unset
  float soft_cap = 0;
  bool bias = false;
  int kv_heads = 4;  // of 4 query heads
};

v1::ExecuteRequest AttentionRequest(DType dtype, int64_t d, const Option& o, uint64_t seed) {
  constexpr int64_t kB = 2, kSq = 77, kSk = 203, kHq = 4;
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  auto& inputs = *request.mutable_inputs();
  inputs["q"] = ToWire(RandomTensor(dtype, {kB, kSq, kHq, d}, seed, -1.0f, 1.0f));
  inputs["k"] = ToWire(RandomTensor(dtype, {kB, kSk, o.kv_heads, d}, seed + 1, -1.0f, 1.0f));
  inputs["v"] = ToWire(RandomTensor(dtype, {kB, kSk, o.kv_heads, d}, seed + 2, -1.0f, 1.0f));
  if (o.bias) {
    inputs["bias"] = ToWire(RandomTensor(DType::kF32, {1, kHq, kSq, kSk}, seed + 3, -2.0f, 2.0f));
  }
  v1::FlashAttentionParams& params = *request.mutable_flash_attention();
  params.set_causal(o.causal);
  if (o.window_left >= 0) params.set_window_left(o.window_left);
  params.set_logits_soft_cap(o.soft_cap);
  return request;
}

struct Answer {
  grpc::Status status;
  std::string platform;
  Tensor out;
};

Answer Call(v1::KernelService::Stub& stub, v1::ExecuteRequest request, const std::string& on) {
  request.set_platform(on);
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Answer answer;
  answer.status = stub.Execute(&context, request, &response);
  answer.platform = response.platform();
  auto it = response.mutable_outputs()->find("out");
  if (answer.status.ok() && it != response.mutable_outputs()->end()) {
    absl::StatusOr<Tensor> out = TakeTensor(&it->second, "out");
    if (out.ok()) answer.out = *std::move(out);
  }
  return answer;
}

bool ServesCudnn(v1::KernelService::Stub& stub) {
  v1::ListKernelsResponse kernels;
  grpc::ClientContext context;
  if (!stub.ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok()) return false;
  for (const v1::KernelInfo& k : kernels.kernels()) {
    if (k.name() != "flash_attention") continue;
    for (const std::string& p : k.platforms()) {
      if (p == "cudnn") return true;
    }
  }
  return false;
}

// A server on the GPU; skips the test without a GPU.
#define START_GPU_SERVER(server)                                                \
  ServerProcess server;                                                         \
  ASSERT_TRUE(server.Start({"--cache=memory", "--metrics-listen=off"}).ok());  \
  if (!absl::StrContains(server.startup_line(), "cuda:0")) {                    \
    GTEST_SKIP() << "no GPU: " << server.startup_line();                        \
  }

TEST(ServerPlatformsTest, EachPlatformNameIsAnsweredByItsOwnImplementation) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  const bool cudnn = ServesCudnn(*stub);
  const std::vector<Option> options = {
      {"plain"},
      {"causal", true},
      {"window 32", false, 32},
      {"soft cap 30", true, -1, 30.0f},
      {"bias", false, -1, 0, true},
      {"gqa 4:1", true, -1, 0, false, 1},
  };
  int cudnn_ran = 0, cases = 0;
  uint64_t seed = 9100;
  for (const int64_t d : {32, 64, 80, 96, 128, 256}) {
    for (const Option& o : options) {
      const DType dtype = (seed / 10) % 2 == 0 ? DType::kBF16 : DType::kF16;
      const std::string label =
          absl::StrCat(Sv(DTypeName(dtype)), " D=", d, " ", o.label, " seed ", seed);
      SCOPED_TRACE(label);
      const v1::ExecuteRequest request = AttentionRequest(dtype, d, o, seed);
      seed += 10;
      ++cases;
      const Answer want = Call(*stub, request, "cpu");
      ASSERT_TRUE(want.status.ok()) << want.status.error_message();
      const double tolerance = dtype == DType::kBF16 ? 2e-2 : 5e-3;
      auto check = [&](const Answer& got, const std::string& platform) {
        ASSERT_TRUE(got.status.ok()) << platform << ": " << got.status.error_message();
        ASSERT_EQ(got.out.shape(), want.out.shape()) << platform;
        EXPECT_LE(RelativeError(got.out, want.out), tolerance) << platform;
      };

      const Answer own = Call(*stub, request, "cuda");
      if (d == 80) {  // no own kernel for it: refused, never served by another implementation
        EXPECT_EQ(own.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
        EXPECT_TRUE(absl::StrContains(own.status.error_message(), "head dim 80"))
            << own.status.error_message();
      } else {
        check(own, "cuda");
        EXPECT_EQ(own.platform, "cuda");
      }

      const Answer theirs = Call(*stub, request, "cudnn");
      const bool theirs_ran = theirs.status.ok();
      if (!cudnn) {
        EXPECT_EQ(theirs.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
      } else if (theirs.status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        std::printf("  cudnn refuses %s: %s\n", label.c_str(),
                    theirs.status.error_message().c_str());
      } else {
        check(theirs, "cudnn");
        EXPECT_EQ(theirs.platform, "cudnn");
        ++cudnn_ran;
      }

      for (const std::string automatic : {"auto", ""}) {
        const Answer best = Call(*stub, request, automatic);
        check(best, "auto");
        if (d == 80) {  // cuDNN's where it runs the case, else the cpu reference's
          EXPECT_EQ(best.platform, theirs_ran ? "cudnn" : "cpu");
        } else {
          EXPECT_TRUE(best.platform == "cuda" || (cudnn && best.platform == "cudnn"))
              << best.platform;
        }
      }
    }
  }
  std::printf("  cudnn ran %d of %d cases\n", cudnn_ran, cases);
  if (cudnn) {
    EXPECT_GE(cudnn_ran, cases / 2);
  }
}

// Tuned on "auto", the winner is the fastest candidate of either platform, and the calls after
// it are answered by that platform; tuned on "cuda", only the own kernels' configs are timed.
TEST(ServerPlatformsTest, AutoTunesAcrossBothAndNamedPlatformsWithinTheirOwn) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  const bool cudnn = ServesCudnn(*stub);
  const Option causal{"causal", true};
  for (const std::string platform : {"auto", "cuda", "cudnn"}) {
    SCOPED_TRACE(platform);
    if (platform == "cudnn" && !cudnn) continue;
    const v1::ExecuteRequest call = AttentionRequest(DType::kBF16, 128, causal, 9900);
    v1::AutotuneRequest request;
    request.set_kernel(call.kernel());
    *request.mutable_inputs() = call.inputs();
    *request.mutable_flash_attention() = call.flash_attention();
    request.set_platform(platform);
    v1::AutotuneResponse tuned;
    grpc::ClientContext context;
    const grpc::Status status = stub->Autotune(&context, request, &tuned);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::map<std::string, int> timed;
    double fastest = 1e300;
    std::string fastest_platform;
    for (const v1::CandidateResult& c : tuned.candidates()) {
      if (c.status().code() != 0) continue;
      ++timed[c.config().platform()];
      if (c.median_us() < fastest) {
        fastest = c.median_us();
        fastest_platform = c.config().platform();
      }
    }
    EXPECT_EQ(tuned.best().platform(), fastest_platform);
    EXPECT_EQ(tuned.platform(), fastest_platform);
    if (platform == "auto") {
      EXPECT_GT(timed["cuda"], 0);
      if (cudnn) {
        EXPECT_GT(timed["cudnn"], 0);
      }
    } else {
      EXPECT_EQ(timed.size(), 1u);
      EXPECT_GT(timed[platform], 0);
    }
    const Answer after = Call(*stub, call, platform);
    ASSERT_TRUE(after.status.ok()) << after.status.error_message();
    EXPECT_EQ(after.platform, fastest_platform);
  }
}

}  // namespace
}  // namespace kernelserve::testing
