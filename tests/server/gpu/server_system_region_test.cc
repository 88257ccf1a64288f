// System shared-memory regions on a GPU server, as a real process on a real GPU: page-locked
// only within --max-pinned-shared-memory-bytes (the rest stay unpinned and work the same), and
// the CUDA mean_pooling_bwd reading its cu_seqlens (an index input, copied when the call is
// resolved) and writing dx straight into the region, bit for bit the expected quotients.
// Skips where the server sees no GPU.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace kernelserve::testing {
namespace {

constexpr int64_t kRows = 100, kHidden = 64;
const std::vector<int32_t> kOffsets = {0, 10, 10, 40, 77, 100};  // an empty sequence inside
constexpr size_t kDoutAt = 0, kOffsetsAt = 4096, kDxAt = 8192;
constexpr size_t kRegionBytes = 768 << 10;

// mean_pooling_bwd on GPU 0 with dout and cu_seqlens in `region` and dx written into it.
v1::ExecuteRequest BackwardInRegion(const std::string& region) {
  const int64_t sequences = static_cast<int64_t>(kOffsets.size()) - 1;
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling_bwd");
  request.set_device(0);
  v1::Tensor& dout = (*request.mutable_inputs())["dout"];
  dout.set_dtype(v1::DTYPE_F32);
  dout.add_shape(sequences);
  dout.add_shape(kHidden);
  *dout.mutable_ref() = RegionRef(region, kDoutAt, sequences * kHidden * sizeof(float));
  v1::Tensor& offsets = (*request.mutable_inputs())["cu_seqlens"];
  offsets.set_dtype(v1::DTYPE_I32);
  offsets.add_shape(static_cast<int64_t>(kOffsets.size()));
  *offsets.mutable_ref() = RegionRef(region, kOffsetsAt, kOffsets.size() * sizeof(int32_t));
  v1::Tensor& x = (*request.mutable_inputs())["x"];  // shape only
  x.set_dtype(v1::DTYPE_F32);
  x.add_shape(kRows);
  x.add_shape(kHidden);
  (*request.mutable_output_regions())["dx"] =
      RegionRef(region, kDxAt, kRows * kHidden * sizeof(float));
  return request;
}

TEST(ServerSystemRegionTest, PinnedWithinTheCapAndTheBackwardWritesDxIntoEither) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--max-pinned-shared-memory-bytes=1048576"}).ok());
  if (!absl::StrContains(server.startup_line(), "cuda:0")) {
    GTEST_SKIP() << "no GPU: " << server.startup_line();
  }
  auto stub = MakeStub(server.address());
  ShmObject first(kRegionBytes), second(kRegionBytes);
  for (auto [name, object] : {std::pair{"first", &first}, std::pair{"second", &second}}) {
    grpc::ClientContext context;
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(object->key());
    request.set_byte_size(kRegionBytes);
    v1::RegisterSharedMemoryResponse response;
    grpc::Status status = stub->RegisterSystemSharedMemory(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  {
    // 1.5 MiB registered, 1 MiB may be page-locked: the first is, the second is not.
    grpc::ClientContext context;
    v1::SharedMemoryStatusResponse listed;
    ASSERT_TRUE(stub->SharedMemoryStatus(&context, {}, &listed).ok());
    ASSERT_EQ(listed.regions_size(), 2);
    for (const v1::SharedMemoryRegion& region : listed.regions()) {
      EXPECT_EQ(region.pinned(), region.name() == "first") << region.name();
    }
  }
  std::mt19937 random(11);
  std::uniform_real_distribution<float> uniform(-1.5f, 2.5f);
  for (auto [name, object] : {std::pair{"first", &first}, std::pair{"second", &second}}) {
    const int64_t sequences = static_cast<int64_t>(kOffsets.size()) - 1;
    std::vector<float> dout(static_cast<size_t>(sequences * kHidden));
    for (float& v : dout) v = uniform(random);
    std::memcpy(object->data() + kDoutAt, dout.data(), dout.size() * sizeof(float));
    std::memcpy(object->data() + kOffsetsAt, kOffsets.data(), kOffsets.size() * sizeof(int32_t));
    std::memset(object->data() + kDxAt, 0xff, kRows * kHidden * sizeof(float));  // NaN
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status status = stub->Execute(&context, BackwardInRegion(name), &response);
    ASSERT_TRUE(status.ok()) << name << ": " << status.error_message();
    EXPECT_EQ(response.platform(), "cuda") << name;
    EXPECT_TRUE(response.outputs().at("dx").data().empty()) << name;  // it is in the region
    const auto* dx = reinterpret_cast<const float*>(object->data() + kDxAt);
    int64_t mismatches = 0;
    for (int64_t n = 0; n < sequences; ++n) {
      const int32_t begin = kOffsets[n], end = kOffsets[n + 1];
      for (int32_t row = begin; row < end; ++row) {
        for (int64_t h = 0; h < kHidden; ++h) {
          const float want = dout[n * kHidden + h] / static_cast<float>(end - begin);
          if (std::memcmp(&dx[row * kHidden + h], &want, sizeof(float)) != 0) ++mismatches;
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
