// The C++ client against a real kernelserve-server process (path in $KERNELSERVE_SERVER).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/client.h"
#include "core/utils/testing.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// One server for the whole suite.
class ClientServerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* server = std::getenv("KERNELSERVE_SERVER");
    ASSERT_NE(server, nullptr) << "set KERNELSERVE_SERVER to the kernelserve-server binary";
    const std::string target = "127.0.0.1:" + std::to_string(FreePort());
    std::vector<std::string> args = {server, "--listen=" + target, "--metrics-listen=off",
                                     "--cache=memory"};
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    ClientOptions options;
    options.target = target;
    options.deadline = absl::Seconds(2);
    client_ = Client::Connect(options).value().release();
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      absl::StatusOr<HealthStatus> health = client_->Health();
      if (health.ok() && *health == HealthStatus::kServing) return;
      ASSERT_EQ(waitpid(pid_, nullptr, WNOHANG), 0) << "kernelserve-server exited";
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "kernelserve-server is not SERVING after 30 s";
  }

  static void TearDownTestSuite() {
    delete client_;
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  void SetUp() override { ASSERT_NE(client_, nullptr) << "the server did not start"; }

  static pid_t pid_;
  static Client* client_;
};

pid_t ClientServerTest::pid_ = -1;
Client* ClientServerTest::client_ = nullptr;

// Means over axis 1 of x [B,S,H] in double.
std::vector<double> MeanOverRows(const Tensor& x) {
  const int64_t B = x.dim(0), S = x.dim(1), H = x.dim(2);
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> out(B * H, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) out[b * H + h] += v[(b * S + s) * H + h] / S;
    }
  }
  return out;
}

TEST_F(ClientServerTest, MeanPooling) {
  const Tensor x = RandomTensor(DType::kF32, {3, 45, 20}, 1);
  MeanPoolingOptions options;
  options.chunk_size = 16;
  options.run.request_id = "req-1";
  absl::StatusOr<RunResult> r = client_->MeanPooling(x, options);
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& out = r->outputs.at("out");
  EXPECT_EQ(out.shape(), (Shape{3, 20}));
  AllCloseResult close = AllClose(out.ToDoubles(), MeanOverRows(x), 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;
  EXPECT_EQ(r->request_id, "req-1");
  EXPECT_TRUE(r->source.has_value());
  EXPECT_EQ(r->platform, "cpu");
  EXPECT_GE(r->timings.total_us, r->timings.kernel_us);
}

TEST_F(ClientServerTest, MeanPoolingVarlenWithOverride) {
  const Tensor x = RandomTensor(DType::kF32, {12, 8}, 2);
  MeanPoolingOptions options;
  options.cu_seqlens = Tensor::FromInts(DType::kI32, {3}, {0, 5, 12});
  KernelConfig config;
  config.block_size = 4;
  config.num_warps = 1;
  options.run.config = config;
  absl::StatusOr<RunResult> r = client_->MeanPooling(x, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, ConfigSource::kOverride);
  EXPECT_EQ(r->config.block_size, 4);
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> expected(2 * 8, 0.0);
  for (int64_t row = 0; row < 12; ++row) {
    const int n = row < 5 ? 0 : 1;
    for (int h = 0; h < 8; ++h) expected[n * 8 + h] += v[row * 8 + h] / (n == 0 ? 5 : 7);
  }
  AllCloseResult close = AllClose(r->outputs.at("out").ToDoubles(), expected, 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;
}

// With one key per sequence the softmax weight is 1: out = v, and lse is the (scaled,
// soft-capped) logit itself.
TEST_F(ClientServerTest, FlashAttentionSingleKey) {
  const int64_t B = 2, Sq = 3, Hq = 4, Hkv = 2, D = 8;
  const Tensor q = RandomTensor(DType::kF32, {B, Sq, Hq, D}, 3);
  const Tensor k = RandomTensor(DType::kF32, {B, 1, Hkv, D}, 4);
  const Tensor v = RandomTensor(DType::kF32, {B, 1, Hkv, D}, 5);
  FlashAttentionOptions options;
  options.softmax_scale = 0.75f;
  options.logits_soft_cap = 1.5f;
  options.return_lse = true;
  absl::StatusOr<RunResult> r = client_->FlashAttention(q, k, v, options);
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& out = r->outputs.at("out");
  const Tensor& lse = r->outputs.at("lse");
  ASSERT_EQ(out.shape(), q.shape());
  ASSERT_EQ(lse.shape(), (Shape{B, Hq, Sq}));
  std::vector<double> want_out, want_lse(B * Hq * Sq);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Sq; ++i) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kv = (b * Hkv + h / (Hq / Hkv)) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += q.GetFloat(((b * Sq + i) * Hq + h) * D + d) * k.GetFloat(kv + d);
          want_out.push_back(v.GetFloat(kv + d));
        }
        want_lse[(b * Hq + h) * Sq + i] = 1.5 * std::tanh(0.75 * dot / 1.5);
      }
    }
  }
  AllCloseResult out_close = AllClose(out.ToDoubles(), want_out, 1e-5, 1e-6);
  EXPECT_TRUE(out_close.ok) << out_close.message;
  AllCloseResult lse_close = AllClose(lse.ToDoubles(), want_lse, 1e-5, 1e-6);
  EXPECT_TRUE(lse_close.ok) << lse_close.message;
}

TEST_F(ClientServerTest, BadInputIsInvalidArgument) {
  absl::StatusOr<RunResult> r = client_->MeanPooling(RandomTensor(DType::kF32, {4, 8}, 6));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'x'"), std::string::npos) << r.status();
}

TEST_F(ClientServerTest, DeadlineExceeded) {
  // Attention over 2048 keys on the CPU takes far longer than the 20 ms deadline.
  FlashAttentionOptions options;
  options.run.deadline = absl::Milliseconds(20);
  absl::StatusOr<RunResult> r =
      client_->FlashAttention(RandomTensor(DType::kF32, {1, 2048, 4, 64}, 7),
                              RandomTensor(DType::kF32, {1, 2048, 4, 64}, 8),
                              RandomTensor(DType::kF32, {1, 2048, 4, 64}, 9), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientServerTest, ExecuteBatchKeepsPerItemErrors) {
  v1::ExecuteBatchRequest request;
  request.set_kernel("mean_pooling");
  request.mutable_mean_pooling();
  std::vector<Tensor> xs = {RandomTensor(DType::kF32, {2, 6, 4}, 8),
                            RandomTensor(DType::kF32, {2, 6}, 9),  // bad rank
                            RandomTensor(DType::kF32, {2, 6, 4}, 10)};
  for (const Tensor& x : xs) {
    v1::Tensor& proto = (*request.add_items()->mutable_inputs())["x"];
    proto.set_dtype(v1::DTYPE_F32);
    proto.mutable_shape()->Assign(x.shape().begin(), x.shape().end());
    proto.set_data(x.bytes());
  }
  absl::StatusOr<BatchResult> batch = client_->ExecuteBatch(request);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 3u);
  EXPECT_EQ(batch->items[1].status().code(), absl::StatusCode::kInvalidArgument);
  for (int i : {0, 2}) {
    ASSERT_TRUE(batch->items[i].ok()) << batch->items[i].status();
    AllCloseResult close =
        AllClose(batch->items[i]->outputs.at("out").ToDoubles(), MeanOverRows(xs[i]), 1e-5, 1e-6);
    EXPECT_TRUE(close.ok) << close.message;
  }
}

TEST_F(ClientServerTest, AutotuneAndMetadata) {
  v1::AutotuneRequest request;
  request.set_kernel("mean_pooling");
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int64_t dim : {2, 64, 16}) x.add_shape(dim);
  absl::StatusOr<v1::AutotuneResponse> tuned = client_->Autotune(request);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_GT(tuned->candidates_size(), 0);
  EXPECT_EQ(tuned->config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  absl::StatusOr<v1::ListConfigsResponse> configs = client_->ListConfigs("mean_pooling");
  ASSERT_TRUE(configs.ok()) << configs.status();
  bool found = false;
  for (const v1::ConfigEntry& e : configs->entries()) found |= e.cache_key() == tuned->cache_key();
  EXPECT_TRUE(found) << "the tuned config is cached under " << tuned->cache_key();
  ASSERT_TRUE(client_->DeleteConfig(tuned->cache_key()).ok());
  absl::StatusOr<v1::ServerInfo> info = client_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version().empty());
  absl::StatusOr<v1::ListKernelsResponse> kernels = client_->ListKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  EXPECT_GE(kernels->kernels_size(), 2);
}

}  // namespace
}  // namespace kernelserve
