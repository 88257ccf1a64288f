// The C++ client against a real kernelserve-server process (path in $KERNELSERVE_SERVER).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/utils/segment_ids.h"
#include "gtest/gtest.h"
#include "tests/client/e2e/client_fixture.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

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
  config.named["threads"] = 1;
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

// Any kernel by name with params by name; and packed sequences as a client has them (a
// block-diagonal mask) turned into segment ids (core/utils/segment_ids.h): attention with those
// ids equals attention with the same mask as a -inf bias.
TEST_F(ClientServerTest, CallByNameWithSegmentIdsFromAMask) {
  const Tensor x = RandomTensor(DType::kF32, {2, 9, 6}, 21);
  absl::StatusOr<RunResult> by_name =
      client_->Call("mean_pooling", {{"x", x}}, {{"chunk_size", int64_t{4}}});
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  AllCloseResult close =
      AllClose(by_name->outputs.at("out").ToDoubles(), MeanOverRows(x), 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;

  const int64_t B = 2, S = 7, H = 2, D = 8;
  // Batch 0: tokens 0..2 and 3..6 are two sequences; batch 1: one sequence and 2 padding rows.
  std::vector<int64_t> mask(B * S * S, 0);
  auto same = [&](int64_t b, int64_t i, int64_t j) { mask[(b * S + i) * S + j] = 1; };
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t j = 0; j < S; ++j) {
      if ((i < 3) == (j < 3)) same(0, i, j);
      if (i < 5 && j < 5) same(1, i, j);
    }
  }
  absl::StatusOr<Tensor> ids = MaskToSegmentIds(Tensor::FromInts(DType::kBool, {B, S, S}, mask));
  ASSERT_TRUE(ids.ok()) << ids.status();
  TensorMap inputs = {{"q", RandomTensor(DType::kF32, {B, S, H, D}, 22)},
                      {"k", RandomTensor(DType::kF32, {B, S, H, D}, 23)},
                      {"v", RandomTensor(DType::kF32, {B, S, H, D}, 24)}};
  TensorMap with_ids = inputs;
  with_ids["q_segment_ids"] = *ids;
  with_ids["kv_segment_ids"] = *ids;
  Tensor bias = Tensor::Zeros(DType::kF32, {B, 1, S, S});
  for (int64_t i = 0; i < B * S * S; ++i) {
    if (mask[i] == 0) bias.SetFloat(i, -std::numeric_limits<float>::infinity());
  }
  TensorMap with_bias = inputs;
  with_bias["bias"] = bias;
  absl::StatusOr<RunResult> a = client_->Call("flash_attention", with_ids, {{"causal", false}});
  absl::StatusOr<RunResult> b = client_->Call("flash_attention", with_bias);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  close = AllClose(a->outputs.at("out").ToDoubles(), b->outputs.at("out").ToDoubles(), 1e-6, 1e-7);
  EXPECT_TRUE(close.ok) << close.message;
  absl::StatusOr<RunResult> unknown =
      client_->Call("mean_pooling", {{"x", x}}, {{"chunk", int64_t{4}}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
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
    proto.set_data(std::string(x.bytes()));
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
