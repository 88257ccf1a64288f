// ResidentTensors and ResidentLease in process: creates (zeroed, idempotent, capped), leases
// (readers share, a writer excludes, all or nothing), expiry of idle tensors only, deletes that
// spare held tensors, and GPU placement and room through a fake GpuMemoryAccess (host memory
// standing for GPU 0: no GPU here).
#include "server/resident.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

// GPU 0 as host memory; counts what it is asked.
class FakeGpu final : public GpuMemoryAccess {
 public:
  absl::StatusOr<std::shared_ptr<void>> Open(std::string_view, int, uint64_t) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status CopyToHost(void* host, const void* gpu, size_t bytes) override {
    std::memcpy(host, gpu, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<void>> Pin(void*, size_t) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::shared_ptr<void>> Allocate(int device, uint64_t bytes) override {
    if (device != 0) return absl::InvalidArgumentError("no such GPU");
    if (bytes > (uint64_t{1} << 30)) return absl::ResourceExhaustedError("GPU 0 is out of memory");
    ++allocations;
    auto* memory = new std::vector<char>(bytes, 0);
    return std::shared_ptr<void>(memory->data(), [memory](void*) { delete memory; });
  }
  absl::Status CopyFromHost(void* gpu, const void* host, size_t bytes) override {
    std::memcpy(gpu, host, bytes);
    ++uploads;
    return absl::OkStatus();
  }
  int allocations = 0;
  int uploads = 0;
};

Caller Alice() {
  Caller caller;
  caller.identity = "alice";
  caller.role = Role::kCaller;
  return caller;
}

ResidentCreate Spec(const std::string& name, Shape shape, int device = -1) {
  ResidentCreate create;
  create.name = name;
  create.spec = {DType::kF32, std::move(shape)};
  create.device = device;
  return create;
}

TEST(ResidentTensorsTest, CreatesAreZeroedIdempotentAndCapped) {
  ResidentOptions options;
  options.max_bytes = 1000;
  options.quota_bytes = 600;
  std::vector<std::string> refusals;
  options.on_refusal = [&](const std::string& owner, const char* cap) {
    refusals.push_back(owner + ":" + cap);
  };
  ResidentTensors registry(options, nullptr);
  bool created = false;
  auto a = registry.Create(Alice(), Spec("a", {100}), &created);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(created);
  EXPECT_EQ((*a)->byte_size(), 400u);
  EXPECT_EQ(std::string((*a)->data(), 400), std::string(400, '\0'));
  auto again = registry.Create(Alice(), Spec("a", {100}), &created);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(again->get(), a->get());
  EXPECT_EQ(registry.Create(Alice(), Spec("a", {101}), &created).status().code(),
            absl::StatusCode::kAlreadyExists);
  absl::Status quota = registry.Create(Alice(), Spec("b", {60}), &created).status();
  EXPECT_EQ(quota.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(quota.message().find("--quota-resident-bytes=600"), std::string::npos) << quota;
  Caller bob;
  bob.identity = "bob";
  ASSERT_TRUE(registry.Create(bob, Spec("b", {100}), &created).ok());
  absl::Status max = registry.Create(bob, Spec("c", {100}), &created).status();
  EXPECT_NE(max.message().find("--max-resident-bytes=1000"), std::string::npos) << max;
  EXPECT_EQ(refusals, (std::vector<std::string>{"alice:quota_bytes", "bob:max_bytes"}));
  EXPECT_EQ(registry.bytes(), 800);
  EXPECT_EQ(registry.count(), 2);
  EXPECT_EQ(registry.Create(Alice(), Spec("", {1}), &created).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Create(Alice(), Spec("z", {0, 4}), &created).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Create(Alice(), Spec("g", {4}, 0), &created).status().code(),
            absl::StatusCode::kInvalidArgument);  // no GPUs
}

TEST(ResidentTensorsTest, LeasesShareReadersAndExcludeAWriterAllOrNothing) {
  ResidentTensors registry({}, nullptr);
  bool created = false;
  auto a = *registry.Create(Alice(), Spec("a", {4}), &created);
  auto b = *registry.Create(Alice(), Spec("b", {4}), &created);
  auto reader1 = std::make_unique<ResidentLease>(&registry);
  auto reader2 = std::make_unique<ResidentLease>(&registry);
  reader1->Add(a, false);
  reader2->Add(a, false);
  ASSERT_TRUE(reader1->Acquire());
  ASSERT_TRUE(reader2->Acquire());
  {
    // Writing a (and b) waits for the readers, taking nothing meanwhile: b stays free.
    ResidentLease writer(&registry);
    writer.Add(b, true);
    writer.Add(a, true);
    EXPECT_FALSE(writer.Acquire(absl::Now() + absl::Milliseconds(20)));
    ResidentLease other(&registry);
    other.Add(b, true);
    EXPECT_TRUE(other.Acquire(absl::Now() + absl::Milliseconds(20)));
  }
  std::atomic<bool> written{false};
  std::thread write([&] {
    ResidentLease writer(&registry);
    writer.Add(a, false);
    writer.Add(a, true);  // the same tensor twice: written
    EXPECT_TRUE(writer.Acquire(absl::Now() + absl::Seconds(10)));
    written = true;
    // A reader waits for the writer in turn.
    ResidentLease late(&registry);
    late.Add(a, false);
    EXPECT_FALSE(late.Acquire(absl::Now() + absl::Milliseconds(20)));
  });
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(written);
  reader1.reset();
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(written);  // reader2 still reads
  reader2.reset();
  write.join();
  EXPECT_TRUE(written);
  ResidentLease after(&registry);
  after.Add(a, true);
  EXPECT_TRUE(after.Acquire(absl::Now() + absl::Milliseconds(20)));
}

TEST(ResidentTensorsTest, OnlyIdleTensorsExpireAndDeleteSparesHeldOnes) {
  ResidentOptions options;
  options.default_ttl = absl::Seconds(10);
  ResidentTensors registry(options, nullptr);
  bool created = false;
  auto held = *registry.Create(Alice(), Spec("held", {4}), &created);
  auto idle = *registry.Create(Alice(), Spec("idle", {4}), &created);
  CallRegions call;
  call.Add(held->Span());
  EXPECT_EQ(held->calls(), 1);
  EXPECT_EQ(registry.Expire(absl::Now() + absl::Seconds(5)), 0);
  EXPECT_EQ(registry.Expire(absl::Now() + absl::Seconds(11)), 1);
  EXPECT_TRUE(registry.Find(Alice(), "held").ok());
  EXPECT_EQ(registry.Find(Alice(), "idle").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<int> refused = registry.Delete(Alice(), "", "held");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*registry.Delete(Alice(), "", ""), 0);  // "every one" spares it
  EXPECT_EQ(registry.Delete(Alice(), "bob", "").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(ResidentTensorsTest, GpuTensorsComeFromTheGpuWithinItsRoom) {
  FakeGpu gpu;
  ResidentOptions options;
  options.gpu_room = [](int device) { return device == 0 ? int64_t{1000} : int64_t{0}; };
  ResidentTensors registry(options, &gpu);
  bool created = false;
  auto on_gpu = registry.Create(Alice(), Spec("g", {200}, 0), &created);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  EXPECT_EQ((*on_gpu)->device(), 0);
  EXPECT_EQ(gpu.allocations, 1);
  absl::Status room = registry.Create(Alice(), Spec("h", {100}, 0), &created).status();
  EXPECT_EQ(room.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(room.message().find("the 1000 bytes of resident tensors GPU 0 may hold"),
            std::string::npos)
      << room;
  // The host has room still.
  ASSERT_TRUE(registry.Create(Alice(), Spec("h", {100}, -1), &created).ok());
  const float values[2] = {1.5f, -2.0f};
  ASSERT_TRUE(registry.CopyIn(**on_gpu, 8, values, sizeof(values)).ok());
  EXPECT_EQ(gpu.uploads, 1);
  float back[2] = {0, 0};
  ASSERT_TRUE(registry.CopyOut(**on_gpu, 8, back, sizeof(back)).ok());
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(registry.ByDevice().at(0).first, 800);
  EXPECT_EQ(registry.ByDevice().at(-1).second, 1);
}

TEST(ResidentTensorsTest, ConcurrentCreatesStayWithinEveryCap) {
  FakeGpu gpu;
  ResidentOptions options;
  options.max_bytes = 4000;
  options.quota_bytes = 1000;
  options.gpu_room = [](int) { return int64_t{600}; };
  ResidentTensors registry(options, &gpu);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&registry, t] {
      for (int i = 0; i < 20; ++i) {
        bool created = false;
        (void)registry.Create(Alice(), Spec(absl::StrCat("t", t, "-", i), {25}, i % 2 - 1),
                              &created);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(registry.OwnerBytes("alice"), 1000);
  EXPECT_EQ(registry.OwnerBytes("alice"), 1000);  // filled up to the quota exactly
  EXPECT_LE(registry.ByDevice()[0].first, 600);
  EXPECT_EQ(registry.bytes(), int64_t{100} * registry.count());
}

}  // namespace
}  // namespace kernelserve::server
