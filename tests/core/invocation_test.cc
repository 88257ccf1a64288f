#include "core/invocation.h"

#include <functional>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kernelserve {
namespace {

Invocation Sample() {
  Invocation inv;
  inv.kernel_id = "mean_pooling@v1";
  inv.inputs["x"] = TensorSpec{DType::kBF16, {2, 128, 64}};
  inv.inputs["cu_seqlens"] = TensorSpec{DType::kI32, {3}};
  inv.attributes["causal"] = true;
  inv.attributes["window_left"] = int64_t{16};
  inv.attributes["soft_cap"] = 30.0;
  inv.attributes["mode"] = std::string("mean");
  inv.platform = "cuda";
  inv.device.kind = "gpu";
  inv.device.name = "NVIDIA H100";
  inv.device.cc_major = 9;
  inv.device.sm_count = 132;
  inv.device.memory_bytes = int64_t{80} << 30;
  inv.device.driver_version = 12040;
  inv.device.runtime_version = 12030;
  return inv;
}

TEST(ShortSha256Test, KnownDigest) {
  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.
  EXPECT_EQ(ShortSha256("abc"), "ba7816bf8f01cfea");
  EXPECT_EQ(ShortSha256(""), "e3b0c44298fc1c14");
}

TEST(InvocationTest, StableJsonLayout) {
  nlohmann::json json = nlohmann::json::parse(Sample().StableJson());
  EXPECT_EQ(json["kernel"], "mean_pooling@v1");
  EXPECT_EQ(json["platform"], "cuda");
  EXPECT_EQ(json["inputs"]["x"]["dtype"], "bf16");
  EXPECT_EQ(json["inputs"]["x"]["shape"], nlohmann::json({2, 128, 64}));
  EXPECT_TRUE(json["attributes"]["causal"].is_boolean());
  EXPECT_TRUE(json["attributes"]["window_left"].is_number_integer());
  EXPECT_TRUE(json["attributes"]["soft_cap"].is_number_float());
  EXPECT_TRUE(json["attributes"]["mode"].is_string());
  EXPECT_EQ(json["device"]["sm_count"], 132);
  const std::string text = Sample().StableJson();
  EXPECT_LT(text.find("\"attributes\""), text.find("\"device\""));
  EXPECT_LT(text.find("\"device\""), text.find("\"inputs\""));
  EXPECT_LT(text.find("\"cu_seqlens\""), text.find("\"x\""));
}

TEST(InvocationTest, KeyFormat) {
  const std::string key = Sample().CacheKey();
  const std::string prefix = "mean_pooling@v1:";
  ASSERT_EQ(key.rfind(prefix, 0), 0u) << key;
  const std::string hex = key.substr(prefix.size());
  EXPECT_EQ(hex.size(), 16u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(hex, ShortSha256(Sample().StableJson()));
}

TEST(InvocationTest, EqualCallsGiveEqualKeys) {
  Invocation a = Sample();
  Invocation b;  // built in another order
  b.device = a.device;
  b.platform = "cuda";
  b.attributes["mode"] = std::string("mean");
  b.attributes["soft_cap"] = 30.0;
  b.attributes["window_left"] = int64_t{16};
  b.attributes["causal"] = true;
  b.inputs["cu_seqlens"] = TensorSpec{DType::kI32, {3}};
  b.inputs["x"] = TensorSpec{DType::kBF16, {2, 128, 64}};
  b.kernel_id = "mean_pooling@v1";
  EXPECT_EQ(a.CacheKey(), b.CacheKey());
  EXPECT_EQ(a.StableJson(), b.StableJson());
}

TEST(InvocationTest, AnyDifferenceChangesTheKey) {
  const std::string base = Sample().CacheKey();
  const std::vector<std::pair<std::string, std::function<void(Invocation&)>>> changes = {
      {"batch dim", [](Invocation& i) { i.inputs["x"].shape[0] = 3; }},
      {"seq dim", [](Invocation& i) { i.inputs["x"].shape[1] = 129; }},
      {"last dim", [](Invocation& i) { i.inputs["x"].shape[2] = 128; }},
      {"rank", [](Invocation& i) { i.inputs["x"].shape.push_back(1); }},
      {"dtype", [](Invocation& i) { i.inputs["x"].dtype = DType::kF16; }},
      {"input name",
       [](Invocation& i) {
         i.inputs["y"] = i.inputs["x"];
         i.inputs.erase("x");
       }},
      {"bool attr", [](Invocation& i) { i.attributes["causal"] = false; }},
      {"int attr", [](Invocation& i) { i.attributes["window_left"] = int64_t{17}; }},
      {"double attr", [](Invocation& i) { i.attributes["soft_cap"] = 30.5; }},
      {"string attr", [](Invocation& i) { i.attributes["mode"] = std::string("max"); }},
      {"attr type", [](Invocation& i) { i.attributes["window_left"] = 16.0; }},
      {"new attr", [](Invocation& i) { i.attributes["extra"] = int64_t{0}; }},
      {"platform", [](Invocation& i) { i.platform = "cpu"; }},
      {"kind", [](Invocation& i) { i.device.kind = "cpu"; }},
      {"name", [](Invocation& i) { i.device.name = "NVIDIA H200"; }},
      {"cc_major", [](Invocation& i) { i.device.cc_major = 8; }},
      {"cc_minor", [](Invocation& i) { i.device.cc_minor = 9; }},
      {"sm_count", [](Invocation& i) { i.device.sm_count = 114; }},
      {"memory", [](Invocation& i) { i.device.memory_bytes += 1; }},
      {"driver", [](Invocation& i) { i.device.driver_version = 12050; }},
      {"runtime", [](Invocation& i) { i.device.runtime_version = 12040; }},
  };
  for (const auto& [what, change] : changes) {
    Invocation inv = Sample();
    change(inv);
    EXPECT_NE(inv.CacheKey(), base) << what;
  }
  Invocation other_kernel = Sample();
  other_kernel.kernel_id = "flash_attention@v1";
  EXPECT_EQ(other_kernel.CacheKey().rfind("flash_attention@v1:", 0), 0u);
  EXPECT_NE(other_kernel.CacheKey().substr(other_kernel.kernel_id.size()),
            base.substr(std::string("mean_pooling@v1").size()));
}

}  // namespace
}  // namespace kernelserve
