#include "kernels/runtime/cpu/float_convert.h"

#include <cstring>

namespace kernelserve::cpu {

void LoadAsFloat(DType dtype, const void* src, int64_t offset, int64_t n, float* dst) {
  if (n <= 0) return;  // an empty std::vector's data() is null, which memcpy must not see
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(src) + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(p[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(p[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToFloat(p[i]);
      return;
    }
    case DType::kF8E5M2: {
      const uint8_t* p = static_cast<const uint8_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E5M2ToFloat(p[i]);
      return;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return;  // not a float type: excluded by the REQUIRES
  }
}

void StoreFromFloat(DType dtype, const float* src, int64_t n, void* dst, int64_t offset) {
  if (n <= 0) return;  // an empty std::vector's data() is null, which memcpy must not see
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(dst) + offset, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      uint16_t* p = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = FloatToHalf(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* p = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = FloatToBFloat16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      uint8_t* p = static_cast<uint8_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = FloatToF8E4M3(src[i]);
      return;
    }
    case DType::kF8E5M2: {
      uint8_t* p = static_cast<uint8_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = FloatToF8E5M2(src[i]);
      return;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return;  // not a float type: excluded by the REQUIRES
  }
}

}  // namespace kernelserve::cpu
