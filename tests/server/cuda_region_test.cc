// CUDA regions of SharedMemoryRegistry and the tensors made from them, on this GPU-less machine
// through a fake GpuMemoryAccess whose "GPU memory" is host memory: registration and its
// codes, the kinds kept apart, placement, views for floating inputs, host copies for index
// inputs, calls on the CPU refused. The real CUDA IPC path runs in server_gpu_tests.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/region_tensors.h"
#include "server/shared_memory.h"

namespace kernelserve::server {
namespace {

// A caller on this host: a process of this test's user (as a Unix socket or loopback peer is
// known to the server), which may register the objects the test creates.
Caller Local(Caller caller = Caller()) {
  caller.peer.uid = geteuid();
  return caller;
}
// The anonymous caller of a server without authentication, calling from this host.
const Caller kMe = Local();

// Opens handles "gpu-<n>" as a fresh host buffer of n bytes, each byte its index mod 251; any
// other handle fails as a bad one does. Counts what it opened and what is still mapped.
class FakeGpu final : public GpuMemoryAccess {
 public:
  absl::StatusOr<std::shared_ptr<void>> Open(std::string_view raw_handle, int device,
                                             uint64_t byte_size) override {
    if (raw_handle.substr(0, 4) != "gpu-" || device != 0) {
      return absl::InvalidArgumentError("the handle does not open");
    }
    const size_t size = std::stoul(std::string(raw_handle.substr(4)));
    if (size < byte_size) return absl::InvalidArgumentError("allocation too small");
    auto* bytes = new std::vector<char>(size);
    for (size_t i = 0; i < size; ++i) (*bytes)[i] = static_cast<char>(i % 251);
    ++mapped;
    return std::shared_ptr<void>(bytes->data(), [this, bytes](void*) {
      --mapped;
      delete bytes;
    });
  }
  absl::Status CopyToHost(void* host, const void* gpu, size_t bytes) override {
    ++copies;
    std::memcpy(host, gpu, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<void>> Pin(void* host, size_t /*bytes*/) override {
    ++pinned;
    return std::shared_ptr<void>(host, [this](void*) { --pinned; });
  }
  absl::StatusOr<std::shared_ptr<void>> Allocate(int /*device*/, uint64_t /*bytes*/) override {
    return absl::UnimplementedError("not used by these tests");
  }
  absl::Status CopyFromHost(void* gpu, const void* host, size_t bytes) override {
    std::memcpy(gpu, host, bytes);
    return absl::OkStatus();
  }
  int mapped = 0;
  int copies = 0;
  int pinned = 0;  // system regions page-locked now
};

TEST(CudaRegionTest, RegistersListsAndUnregistersApartFromSystemRegions) {
  FakeGpu gpu;
  SharedMemoryRegistry registry({}, &gpu);
  EXPECT_TRUE(registry.cuda());
  ASSERT_TRUE(registry.RegisterCuda(kMe, "c", "gpu-4096", 0, 4000).ok());
  EXPECT_EQ(gpu.mapped, 1);
  auto cuda = registry.List(kMe, "", "", RegionKind::kCuda);
  ASSERT_TRUE(cuda.ok());
  ASSERT_EQ(cuda->size(), 1u);
  EXPECT_EQ((*cuda)[0]->device(), 0);
  EXPECT_EQ((*cuda)[0]->byte_size(), 4000u);
  EXPECT_EQ((*cuda)[0]->key(), "");
  EXPECT_TRUE(registry.List(kMe, "", "", RegionKind::kSystem)->empty());
  EXPECT_EQ(registry.List(kMe, "", "c", RegionKind::kSystem).status().code(),
            absl::StatusCode::kNotFound);
  // Unregister of "" for the other kind leaves it; of its kind removes it and unmaps.
  EXPECT_TRUE(registry.Unregister(kMe, "", "", RegionKind::kSystem).ok());
  EXPECT_EQ(registry.List(kMe, "", "", RegionKind::kAny)->size(), 1u);
  EXPECT_EQ(registry.Unregister(kMe, "", "c", RegionKind::kSystem).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Unregister(kMe, "", "", RegionKind::kCuda).ok());
  EXPECT_TRUE(registry.List(kMe, "", "")->empty());
  EXPECT_EQ(gpu.mapped, 1) << "the list above still holds it";
  cuda->clear();
  EXPECT_EQ(gpu.mapped, 0);
}

TEST(CudaRegionTest, BadRegistrationsGetTheirCodes) {
  FakeGpu gpu;
  SharedMemoryOptions options;
  options.max_bytes = 6000;
  SharedMemoryRegistry registry(options, &gpu);
  absl::Status bad = registry.RegisterCuda(kMe, "b", "not-a-handle", 0, 16);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("region 'b'"), std::string_view::npos) << bad;
  EXPECT_EQ(registry.RegisterCuda(kMe, "b", "gpu-100", 0, 200).code(),
            absl::StatusCode::kInvalidArgument);  // past the allocation
  EXPECT_EQ(registry.RegisterCuda(kMe, "", "gpu-100", 0, 16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterCuda(kMe, "z", "gpu-100", 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.RegisterCuda(kMe, "a", "gpu-5000", 0, 5000).ok());
  EXPECT_EQ(registry.RegisterCuda(kMe, "a", "gpu-16", 0, 16).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.RegisterCuda(kMe, "c", "gpu-2000", 0, 2000).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(gpu.mapped, 1) << "failed registrations leave nothing mapped";

  SharedMemoryOptions off;
  off.cuda = false;
  off.off_reason = "--shared-memory=system";
  SharedMemoryRegistry cuda_off(off, &gpu);
  absl::Status refused = cuda_off.RegisterCuda(kMe, "a", "gpu-16", 0, 16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.message().find("--shared-memory=system"), std::string_view::npos);
  SharedMemoryRegistry no_gpu({});
  EXPECT_FALSE(no_gpu.cuda());
  EXPECT_EQ(no_gpu.RegisterCuda(kMe, "a", "gpu-16", 0, 16).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(CudaRegionTest, FloatingInputsAreGpuViewsAndIndexInputsHostCopies) {
  FakeGpu gpu;
  SharedMemoryRegistry registry({}, &gpu);
  ASSERT_TRUE(registry.RegisterCuda(kMe, "c", "gpu-8192", 0, 8192).ok());
  RegionRefs refs = {{"x", {"c", 256, 2 * 8 * 4}}, {"cu_seqlens", {"c", 1024, 3 * 4}}};
  TensorSpecMap specs = {{"x", {DType::kF32, {2, 8}}}, {"cu_seqlens", {DType::kI32, {3}}}};
  absl::StatusOr<TensorMap> inputs =
      InputsFromRegions(&registry, kMe, refs, specs, /*device=*/0, nullptr);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  const Tensor& x = inputs->at("x");
  EXPECT_EQ(x.device(), 0);
  const Tensor copy = x;  // a view: copies share the GPU bytes, never read them here
  EXPECT_EQ(copy.data(), x.data());
  const Tensor& cu = inputs->at("cu_seqlens");
  EXPECT_EQ(cu.device(), -1);
  EXPECT_EQ(gpu.copies, 1);
  EXPECT_EQ(static_cast<unsigned char>(static_cast<const char*>(cu.data())[0]), 1024 % 251);

  // Unregistered while the tensors hold it: still mapped until they go.
  ASSERT_TRUE(registry.Unregister(kMe, "", "c").ok());
  EXPECT_EQ(gpu.mapped, 1);
  inputs->clear();
  EXPECT_EQ(gpu.mapped, 1) << "the copy still holds it";
}

TEST(CudaRegionTest, CallsOnTheCpuAndMisalignedViewsAreRefused) {
  FakeGpu gpu;
  SharedMemoryRegistry registry({}, &gpu);
  ASSERT_TRUE(registry.RegisterCuda(kMe, "c", "gpu-4096", 0, 4096).ok());
  TensorSpecMap specs = {{"x", {DType::kF16, {4, 8}}}};
  absl::StatusOr<TensorMap> on_cpu =
      InputsFromRegions(&registry, kMe, {{"x", {"c", 0, 64}}}, specs, /*device=*/-1, nullptr);
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(on_cpu.status().message().find("input 'x' is in CUDA region 'c' on GPU 0"),
            std::string_view::npos)
      << on_cpu.status();
  absl::StatusOr<TensorMap> misaligned =
      InputsFromRegions(&registry, kMe, {{"x", {"c", 8, 64}}}, specs, /*device=*/0, nullptr);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputsFromRegions(&registry, kMe, {{"x", {"c", 4090, 64}}}, specs, 0, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // past the end
}

TEST(CudaRegionTest, SystemRegionsArePinnedForTheGpusWhileRegistered) {
  const std::string key = "/kernelserve-cuda-region-test-" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  close(fd);
  FakeGpu gpu;
  SharedMemoryRegistry registry({}, &gpu);
  ASSERT_TRUE(registry.RegisterSystem(kMe, "s", key, 0, 8192).ok());
  EXPECT_EQ(gpu.pinned, 1);
  EXPECT_TRUE((*registry.List(kMe, "", "s"))[0]->pinned());
  ASSERT_TRUE(registry.Unregister(kMe, "", "s").ok());
  EXPECT_EQ(gpu.pinned, 0) << "unpinned when unregistered (before the unmap)";
  SharedMemoryRegistry without_gpus({});
  ASSERT_TRUE(without_gpus.RegisterSystem(kMe, "s", key, 0, 8192).ok());
  EXPECT_FALSE((*without_gpus.List(kMe, "", "s"))[0]->pinned());
  shm_unlink(key.c_str());
}

// A shm_open object of `bytes` bytes under a fresh key, unlinked at the end.
class Object {
 public:
  explicit Object(size_t bytes)
      : key_("/kernelserve-cuda-region-test-" + std::to_string(getpid()) + "-" +
             std::to_string(counter_++)) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }
  ~Object() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }

 private:
  static inline int counter_ = 0;
  std::string key_;
};

TEST(CudaRegionTest, PinningStaysWithinTheServerCapAndEachIdentitysQuota) {
  Object object(16384);
  FakeGpu gpu;
  SharedMemoryOptions options;
  options.max_pinned_bytes = 12288;
  options.quota_pinned_bytes = 8192;
  SharedMemoryRegistry registry(options, &gpu);
  Caller alice = Local();
  alice.identity = "alice";
  alice.role = Role::kCaller;
  Caller bob = alice;
  bob.identity = "bob";
  auto pinned = [&](const Caller& caller, const std::string& name) {
    return (*registry.List(caller, "", name))[0]->pinned();
  };
  ASSERT_TRUE(registry.RegisterSystem(alice, "a1", object.key(), 0, 8192).ok());
  EXPECT_TRUE(pinned(alice, "a1"));
  // Past Alice's quota: registered and usable, not pinned.
  ASSERT_TRUE(registry.RegisterSystem(alice, "a2", object.key(), 0, 4096).ok());
  EXPECT_FALSE(pinned(alice, "a2"));
  EXPECT_TRUE(registry.Span(alice, "a2", 0, 4096, "input 'x'").ok());
  ASSERT_TRUE(registry.RegisterSystem(bob, "b1", object.key(), 0, 4096).ok());
  EXPECT_TRUE(pinned(bob, "b1"));
  // Past the server's cap (12288 pinned).
  ASSERT_TRUE(registry.RegisterSystem(bob, "b2", object.key(), 0, 4096).ok());
  EXPECT_FALSE(pinned(bob, "b2"));
  EXPECT_EQ(gpu.pinned, 2);
  EXPECT_EQ(registry.pinned_bytes(), 12288);

  // Unpinned regions give their share back when they go.
  ASSERT_TRUE(registry.Unregister(alice, "", "a1").ok());
  EXPECT_EQ(gpu.pinned, 1);
  EXPECT_EQ(registry.pinned_bytes(), 4096);
  ASSERT_TRUE(registry.RegisterSystem(bob, "b3", object.key(), 0, 4096).ok());
  EXPECT_TRUE(pinned(bob, "b3"));
  ASSERT_TRUE(registry.Unregister(bob, "", "").ok());
  ASSERT_TRUE(registry.Unregister(alice, "", "").ok());
  EXPECT_EQ(gpu.pinned, 0);
  EXPECT_EQ(registry.pinned_bytes(), 0);

  SharedMemoryOptions none;
  none.max_pinned_bytes = 0;
  SharedMemoryRegistry unpinned(none, &gpu);
  ASSERT_TRUE(unpinned.RegisterSystem(alice, "a", object.key(), 0, 4096).ok());
  EXPECT_FALSE((*unpinned.List(alice, "", "a"))[0]->pinned());
}

TEST(CudaRegionTest, ACallGoesWhereItsCudaRegionsAre) {
  FakeGpu gpu;
  SharedMemoryRegistry registry({}, &gpu);
  ASSERT_TRUE(registry.RegisterCuda(kMe, "c", "gpu-4096", 0, 4096).ok());
  EXPECT_EQ(RegionsGpu(&registry, kMe, {{"x", {"c", 0, 0}}}, {}), 0);
  EXPECT_EQ(RegionsGpu(&registry, kMe, {}, {{"out", {"c", 0, 0}}}), 0);
  EXPECT_EQ(RegionsGpu(&registry, kMe, {{"x", {"unknown", 0, 0}}}, {}), std::nullopt);
  EXPECT_EQ(RegionsGpu(&registry, kMe, {}, {}), std::nullopt);
  v1::ExecuteRequest request;
  (*request.mutable_inputs())["x"].mutable_ref()->set_region("c");
  EXPECT_EQ(RegionsGpu(&registry, kMe, request), 0);
  EXPECT_EQ(RegionsGpu(nullptr, kMe, request), std::nullopt);
}

}  // namespace
}  // namespace kernelserve::server
