// SharedMemoryRegion and the RunOptions that use it, against a real kernelserve-server process
// on this host: inputs read from the region, outputs written into it, equal bit for bit to the
// same calls with inline bytes; the errors with their codes.
#include <fcntl.h>
#include <sys/mman.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "client/client.h"
#include "client/shared_memory.h"
#include "gtest/gtest.h"
#include "tests/client/e2e/client_fixture.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

// NaN bytes over the whole region, so that an output the server does not write shows.
void Poison(const SharedMemoryRegion& region) {
  std::memset(region.data(), 0xff, region.byte_size());
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes();
}

TEST_F(ClientServerTest, SharedMemoryMeanPoolingInAndOut) {
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::CreateSystem(*client_, "pool", 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  Poison(**region);
  const Tensor x = RandomTensor(DType::kF32, {3, 45, 20}, 11);
  absl::StatusOr<Tensor> x_in = (*region)->Put(0, x);
  absl::StatusOr<Tensor> out_view = (*region)->View(64 * 1024, DType::kF32, {3, 20});
  ASSERT_TRUE(x_in.ok() && out_view.ok()) << x_in.status() << out_view.status();

  MeanPoolingOptions shared;
  shared.run.regions = {region->get()};
  shared.run.outputs["out"] = *out_view;
  absl::StatusOr<RunResult> r = client_->MeanPooling(*x_in, shared);
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& out = r->outputs.at("out");
  EXPECT_EQ(out.data(), out_view->data()) << "the output is the region's bytes";
  absl::StatusOr<RunResult> inline_r = client_->MeanPooling(x);
  ASSERT_TRUE(inline_r.ok()) << inline_r.status();
  EXPECT_TRUE(SameBytes(out, inline_r->outputs.at("out")));
  EXPECT_GT(r->timings.total_us, 0);

  // The server lists it; after Unregister a call naming it is NOT_FOUND.
  absl::StatusOr<v1::SharedMemoryStatusResponse> status = client_->SharedMemoryStatus("pool");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->regions_size(), 1);
  EXPECT_EQ(status->regions(0).key(), (*region)->key());
  EXPECT_EQ(status->regions(0).byte_size(), uint64_t{1} << 20);
  ASSERT_TRUE((*region)->Unregister().ok());
  EXPECT_TRUE((*region)->Unregister().ok()) << "idempotent";
  EXPECT_EQ(client_->MeanPooling(*x_in, shared).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientServerTest, SharedMemoryFlashAttentionMixed) {
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::CreateSystem(*client_, "attn", 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  Poison(**region);
  const Tensor q = RandomTensor(DType::kF16, {2, 37, 4, 64}, 12);
  const Tensor k = RandomTensor(DType::kF16, {2, 29, 2, 64}, 13);
  const Tensor v = RandomTensor(DType::kF16, {2, 29, 2, 64}, 14);
  absl::StatusOr<Tensor> q_in = (*region)->Put(0, q);
  absl::StatusOr<Tensor> v_in = (*region)->Put(128 * 1024, v);
  absl::StatusOr<Tensor> out_view = (*region)->View(256 * 1024, DType::kF16, {2, 37, 4, 64});
  absl::StatusOr<Tensor> lse_view = (*region)->View(512 * 1024, DType::kF32, {2, 4, 37});
  ASSERT_TRUE(q_in.ok() && v_in.ok() && out_view.ok() && lse_view.ok());

  FlashAttentionOptions shared;
  shared.causal = true;
  shared.return_lse = true;
  shared.run.regions = {region->get()};
  shared.run.outputs["out"] = *out_view;  // lse comes inline
  absl::StatusOr<RunResult> r = client_->FlashAttention(*q_in, k, *v_in, shared);  // k inline
  ASSERT_TRUE(r.ok()) << r.status();
  FlashAttentionOptions plain;
  plain.causal = true;
  plain.return_lse = true;
  absl::StatusOr<RunResult> inline_r = client_->FlashAttention(q, k, v, plain);
  ASSERT_TRUE(inline_r.ok()) << inline_r.status();
  EXPECT_TRUE(SameBytes(r->outputs.at("out"), inline_r->outputs.at("out")));
  EXPECT_TRUE(SameBytes(r->outputs.at("lse"), inline_r->outputs.at("lse")));
  EXPECT_EQ(r->outputs.at("out").data(), out_view->data());
  // Both outputs into the region.
  shared.run.outputs["lse"] = *lse_view;
  r = client_->FlashAttention(*q_in, k, *v_in, shared);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(SameBytes(r->outputs.at("lse"), inline_r->outputs.at("lse")));
}

TEST_F(ClientServerTest, SharedMemoryErrors) {
  EXPECT_EQ(SharedMemoryRegion::CreateSystem(*client_, "", 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemoryRegion::CreateSystem(*client_, "empty", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::CreateSystem(*client_, "small", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  // The same name again: the server's ALREADY_EXISTS, and the second object is unlinked.
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> again =
      SharedMemoryRegion::CreateSystem(*client_, "small", 4096);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_EQ((*region)->View(4000, DType::kF32, {100}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->View(std::numeric_limits<uint64_t>::max(), DType::kF32, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An output view outside the call's regions is refused before sending.
  MeanPoolingOptions options;
  options.run.outputs["out"] = *(*region)->View(0, DType::kF32, {2, 8});
  EXPECT_EQ(client_->MeanPooling(RandomTensor(DType::kF32, {2, 4, 8}, 15), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An output with too little room: the server's INVALID_ARGUMENT names it.
  options.run.regions = {region->get()};
  options.run.outputs["out"] = *(*region)->View(0, DType::kF32, {2});
  absl::Status small =
      client_->MeanPooling(RandomTensor(DType::kF32, {2, 4, 8}, 16), options).status();
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("output 'out'"), std::string::npos) << small;
  // The destructor unregisters and unlinks.
  const std::string key = (*region)->key();
  region->reset();
  EXPECT_EQ(client_->SharedMemoryStatus("small").status().code(), absl::StatusCode::kNotFound);
  EXPECT_LT(shm_open(key.c_str(), O_RDONLY, 0), 0) << key << " is still there";
}

TEST_F(ClientServerTest, SharedMemoryCudaRegionNeedsAGpuServer) {
  char buffer[64];
  EXPECT_EQ(SharedMemoryRegion::RegisterCuda(*client_, "c", std::string(64, 'h'), nullptr, 64, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // This server has no GPU: the server's UNIMPLEMENTED, saying so.
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::RegisterCuda(*client_, "c", std::string(64, 'h'), buffer, 64, 0);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kUnimplemented) << region.status();
  EXPECT_NE(region.status().message().find("GPU"), std::string::npos) << region.status();
}

TEST_F(ClientServerTest, SharedMemoryViewsOutliveTheRegion) {
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::CreateSystem(*client_, "outlive", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const Tensor x = RandomTensor(DType::kF32, {4, 8}, 17);
  absl::StatusOr<Tensor> view = (*region)->Put(64, x);
  ASSERT_TRUE(view.ok());
  region->reset();
  EXPECT_TRUE(SameBytes(*view, x)) << "the mapping lives while a view holds it";
}

}  // namespace
}  // namespace kernelserve
