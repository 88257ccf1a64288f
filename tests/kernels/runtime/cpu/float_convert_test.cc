#include "kernels/runtime/cpu/float_convert.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve::cpu {
namespace {

// Every dtype HoldsFloats covers loads and stores element by element as its own conversions
// do, at an offset; fp8 saturates on the way in.
TEST(FloatConvertTest, EveryFloatDtypeLoadsAndStoresAtAnOffset) {
  const std::vector<float> values = {1.0f, -2.5f, 0.3f, 1000.0f, 1e6f};
  for (DType dtype : kAllDTypes) {
    if (!HoldsFloats(dtype)) continue;
    std::vector<uint8_t> bytes((values.size() + 2) * ItemSize(dtype), 0xAB);
    StoreFromFloat(dtype, values.data(), static_cast<int64_t>(values.size()), bytes.data(), 2);
    EXPECT_EQ(bytes[0], 0xAB) << DTypeName(dtype);  // before the offset: untouched
    std::vector<float> back(values.size());
    LoadAsFloat(dtype, bytes.data(), 2, static_cast<int64_t>(values.size()), back.data());
    EXPECT_EQ(back[0], 1.0f) << DTypeName(dtype);
    EXPECT_EQ(back[1], -2.5f) << DTypeName(dtype);
    if (dtype == DType::kF8E4M3) {
      EXPECT_EQ(back[2], F8E4M3ToFloat(FloatToF8E4M3(0.3f)));
      EXPECT_EQ(back[3], 448.0f);  // saturated
      EXPECT_EQ(back[4], 448.0f);
    }
    if (dtype == DType::kF8E5M2) {
      EXPECT_EQ(back[2], F8E5M2ToFloat(FloatToF8E5M2(0.3f)));
      EXPECT_EQ(back[3], 1024.0f);
      EXPECT_EQ(back[4], 57344.0f);  // saturated, not infinity
    }
  }
}

}  // namespace
}  // namespace kernelserve::cpu
