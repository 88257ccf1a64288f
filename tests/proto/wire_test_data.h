// Test data of the wire tests: reproducible bytes and f32 tensors of a given size.
#ifndef KERNELSERVE_TESTS_PROTO_WIRE_TEST_DATA_H_
#define KERNELSERVE_TESTS_PROTO_WIRE_TEST_DATA_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/convert.h"

namespace kernelserve::testing {

// `n` bytes of a linear congruential sequence from `seed`.
inline std::string WireBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    s[i] = static_cast<char>(seed >> 24);
  }
  return s;
}

// An f32 tensor of `bytes` / 4 elements holding WireBytes(bytes, seed).
inline v1::Tensor WireTensor(size_t bytes, uint32_t seed) {
  v1::Tensor t;
  t.set_dtype(v1::DTYPE_F32);
  t.add_shape(static_cast<int64_t>(bytes / 4));
  t.set_data(WireBytes(bytes, seed));
  return t;
}

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_PROTO_WIRE_TEST_DATA_H_
