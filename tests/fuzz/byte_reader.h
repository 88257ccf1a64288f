// ByteReader: reads a fuzz input front to back as small typed values. Reads past the end give
// zeros and empty strings, so every input decodes to something. tests/fuzz/make_corpus.py
// writes seeds in the same encoding.
#ifndef KERNELSERVE_TESTS_FUZZ_BYTE_READER_H_
#define KERNELSERVE_TESTS_FUZZ_BYTE_READER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kernelserve::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool empty() const { return p_ == end_; }

  uint8_t U8() { return p_ == end_ ? 0 : *p_++; }

  // A zigzag varint (protobuf's sint64 encoding): small magnitudes take one byte, any int64
  // fits in ten.
  int64_t I64() {
    uint64_t raw = 0;
    for (int shift = 0; shift < 64 && p_ != end_; shift += 7) {
      const uint8_t byte = *p_++;
      raw |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    return static_cast<int64_t>(raw >> 1) ^ -static_cast<int64_t>(raw & 1);
  }

  // I64 clamped to the range of int (as the int32 fields of the wire messages are).
  int Int() {
    const int64_t value = I64();
    if (value > INT32_MAX) return INT32_MAX;
    if (value < INT32_MIN) return INT32_MIN;
    return static_cast<int>(value);
  }

  // Eight raw bytes as a double (any bit pattern: NaN, infinities, subnormals).
  double Double() {
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits |= static_cast<uint64_t>(U8()) << (8 * i);
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }

  // A length byte, then that many bytes.
  std::string String() {
    const size_t n = std::min<size_t>(U8(), static_cast<size_t>(end_ - p_));
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

  // Two length bytes (little-endian), then that many bytes.
  std::string LongString() {
    const size_t want = U8() | (size_t{U8()} << 8);
    const size_t n = std::min<size_t>(want, static_cast<size_t>(end_ - p_));
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

  // Everything not read yet.
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(end_ - p_));
    p_ = end_;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace kernelserve::fuzz

#endif  // KERNELSERVE_TESTS_FUZZ_BYTE_READER_H_
