// SharedMemoryRegistry over real POSIX shared memory: registration and its errors, spans, and a
// region that stays mapped for a call that holds it after it is unregistered.
#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

// A shm_open object of `bytes` bytes, each byte its index mod 251, removed at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes)
      : key_(absl::StrCat("/kernelserve-test-", getpid(), "-", counter_++)) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    for (size_t i = 0; i < bytes; ++i) static_cast<char*>(map)[i] = static_cast<char>(i % 251);
    munmap(map, bytes);
    close(fd);
  }
  ~ShmObject() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }

 private:
  static inline int counter_ = 0;
  std::string key_;
};

TEST(SharedMemoryRegistryTest, RegistersAndSpansAtAnOffset) {
  ShmObject object(10000);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 4099, 5000).ok());
  absl::StatusOr<RegionSpan> span = registry.Span("r", 10, 100, "input 'x'");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->byte_size, 100u);
  EXPECT_EQ(static_cast<unsigned char>(span->data[0]), (4099 + 10) % 251);
  auto listed = registry.List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]->key(), object.key());
  EXPECT_EQ((*listed)[0]->offset(), 4099u);
}

TEST(SharedMemoryRegistryTest, BadRegistrationsGetTheirCodes) {
  ShmObject object(4096);
  SharedMemoryOptions options;
  options.max_bytes = 8192;
  SharedMemoryRegistry registry(options);
  EXPECT_EQ(registry.RegisterSystem("a", "/kernelserve-no-such-object", 0, 16).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.RegisterSystem("a", object.key(), 4000, 200).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterSystem("a", object.key(), 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterSystem("", object.key(), 0, 16).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.RegisterSystem("a", object.key(), 0, 4096).ok());
  EXPECT_EQ(registry.RegisterSystem("a", object.key(), 0, 16).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.RegisterSystem("b", object.key(), 0, 4096).ok());
  const absl::Status full = registry.RegisterSystem("c", object.key(), 0, 16);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-shared-memory-bytes"), std::string::npos) << full;
  EXPECT_EQ(registry.Unregister("zz").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry.Unregister("b").ok());
  EXPECT_TRUE(registry.RegisterSystem("c", object.key(), 0, 16).ok());  // room again
  EXPECT_EQ(registry.Span("nope", 0, 1, "input 'x'").status().code(), absl::StatusCode::kNotFound);
  const absl::Status past = registry.Span("a", 4000, 100, "input 'x'").status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("input 'x'"), std::string::npos) << past;
}

TEST(SharedMemoryRegistryTest, OffRefusesRegistrationSayingWhy) {
  ShmObject object(4096);
  SharedMemoryOptions options;
  options.system = false;
  options.off_reason = "--shared-memory=off";
  SharedMemoryRegistry registry(options);
  const absl::Status off = registry.RegisterSystem("a", object.key(), 0, 16);
  EXPECT_EQ(off.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(off.message().find("--shared-memory=off"), std::string::npos) << off;
}

TEST(SharedMemoryRegistryTest, ASpanKeepsItsRegionMappedAfterUnregister) {
  ShmObject object(8192);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 0, 8192).ok());
  absl::StatusOr<RegionSpan> span = registry.Span("r", 8000, 192, "input 'x'");
  ASSERT_TRUE(span.ok());
  ASSERT_TRUE(registry.Unregister("").ok());
  EXPECT_EQ(registry.Span("r", 0, 1, "input 'x'").status().code(), absl::StatusCode::kNotFound);
  // Still mapped: the span holds the region (a read of unmapped memory would crash here).
  for (int i = 0; i < 192; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(span->data[i]), (8000 + i) % 251);
  }
  std::weak_ptr<const SharedRegion> region = span->region;
  span = absl::NotFoundError("released");
  EXPECT_TRUE(region.expired());
}

}  // namespace
}  // namespace kernelserve::server
