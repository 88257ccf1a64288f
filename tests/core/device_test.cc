#include "core/device.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kernelserve {
namespace {

DeviceFingerprint Gpu() {
  DeviceFingerprint fp;
  fp.kind = "gpu";
  fp.name = "NVIDIA H100 80GB HBM3";
  fp.cc_major = 9;
  fp.cc_minor = 0;
  fp.sm_count = 132;
  fp.memory_bytes = int64_t{80} << 30;
  fp.driver_version = 12040;
  fp.runtime_version = 12030;
  return fp;
}

TEST(PlatformTest, NamesRoundTrip) {
  for (Platform p : {Platform::kCpu, Platform::kCuda, Platform::kCudnn}) {
    EXPECT_EQ(ParsePlatform(PlatformName(p)).value(), p);
  }
  EXPECT_EQ(PlatformName(Platform::kCudnn), "cudnn");
  absl::StatusOr<Platform> bad = ParsePlatform("tpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cuda"), std::string::npos);
}

TEST(DeviceFingerprintTest, JsonSortedAndComplete) {
  const std::string json = Gpu().ToJson();
  nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(parsed["memory_bytes"].get<int64_t>(), int64_t{80} << 30);
  EXPECT_EQ(parsed.size(), 8u);
  EXPECT_LT(json.find("\"cc_major\""), json.find("\"cc_minor\""));
  EXPECT_LT(json.find("\"kind\""), json.find("\"memory_bytes\""));
  EXPECT_LT(json.find("\"runtime_version\""), json.find("\"sm_count\""));
}

TEST(DeviceFingerprintTest, HashIsStableAndSensitive) {
  const std::string hash = Gpu().Hash();
  ASSERT_EQ(hash.size(), 16u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(Gpu().Hash(), hash);
  DeviceFingerprint other = Gpu();
  other.driver_version += 1;
  EXPECT_NE(other.Hash(), hash);
  other = Gpu();
  other.name = "NVIDIA H200";
  EXPECT_NE(other.Hash(), hash);
}

TEST(CpuDeviceInfoTest, DescribesTheCpu) {
  const DeviceInfo info = CpuDeviceInfo();
  EXPECT_EQ(info.platform, Platform::kCpu);
  EXPECT_EQ(info.ordinal, -1);
  EXPECT_EQ(info.fingerprint.kind, "cpu");
  EXPECT_FALSE(info.fingerprint.name.empty());
  EXPECT_GE(info.num_threads, 1);
  EXPECT_EQ(info.fingerprint.sm_count, info.num_threads);
  EXPECT_EQ(CpuDeviceInfo().fingerprint, info.fingerprint);
}

}  // namespace
}  // namespace kernelserve
