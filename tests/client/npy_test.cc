#include "client/cli/npy.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/support/testing.h"

namespace kernelserve::npy {
namespace {

// The dict between the preamble and the data of an encoded file, padding removed.
std::string HeaderOf(const std::string& bytes) {
  const size_t len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  const std::string header = bytes.substr(10, len);
  EXPECT_EQ(header.back(), '\n');
  return header.substr(0, header.find_last_not_of(" \n") + 1);
}

// A version 1.0 file with the given header text (padded as NumPy pads) and data.
std::string MakeFile(std::string header, std::string_view data) {
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + std::string(data);
}

class NpyRoundTripTest : public testing::TestWithParam<DType> {};

TEST_P(NpyRoundTripTest, EncodeThenDecodeKeepsDtypeShapeAndBytes) {
  const DType dtype = GetParam();
  const Tensor tensor = RandomTensor(dtype, {3, 5, 2}, /*seed=*/7, -4.0f, 4.0f);
  const std::string bytes = Encode(tensor);
  EXPECT_EQ((bytes.size() - tensor.nbytes()) % 64, 0u) << "header must be 64-byte aligned";
  ReadOptions options;
  options.u2_as_bf16 = dtype == DType::kBF16;
  if (IsFp8(dtype)) options.u1_as_fp8 = dtype;
  absl::StatusOr<Tensor> back = Decode(bytes, options);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), dtype);
  EXPECT_EQ(back->shape(), tensor.shape());
  EXPECT_EQ(back->bytes(), tensor.bytes());
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, NpyRoundTripTest, testing::ValuesIn(kAllDTypes));

TEST(NpyTest, HeaderIsTheNumpyDict) {
  const Tensor f32 = RandomTensor(DType::kF32, {4, 128, 64}, 1);
  EXPECT_EQ(HeaderOf(Encode(f32)),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 128, 64), }");
  const Tensor vec = RandomTensor(DType::kI64, {7}, 1);
  EXPECT_NE(HeaderOf(Encode(vec)).find("'descr': '<i8'"), std::string::npos);
  EXPECT_NE(HeaderOf(Encode(vec)).find("'shape': (7,)"), std::string::npos);
  const Tensor bf16 = RandomTensor(DType::kBF16, {2}, 1);
  EXPECT_NE(HeaderOf(Encode(bf16)).find("'descr': '<u2'"), std::string::npos);
  const Tensor flags = RandomTensor(DType::kBool, {2}, 1);
  EXPECT_NE(HeaderOf(Encode(flags)).find("'descr': '|b1'"), std::string::npos);
}

TEST(NpyTest, DecodesAFileAsNumpyWritesIt) {
  const Tensor values = Tensor::FromFloats(DType::kF16, {2, 3}, {1, -2, 3.5, 0.25, 8, -0.5});
  const std::string file =
      MakeFile("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", values.bytes());
  absl::StatusOr<Tensor> t = Decode(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kF16);
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->ToFloats(), (std::vector<float>{1, -2, 3.5, 0.25, 8, -0.5}));
  // A scalar: shape ().
  const Tensor scalar = Tensor::FromInts(DType::kI32, {}, {42});
  absl::StatusOr<Tensor> s =
      Decode(MakeFile("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", scalar.bytes()));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->GetInt(0), 42);
}

TEST(NpyTest, U2IsBf16OnlyWhenAsked) {
  const Tensor bits = RandomTensor(DType::kBF16, {4}, 3);
  const std::string file = Encode(bits);
  EXPECT_EQ(Decode(file).status().code(), absl::StatusCode::kInvalidArgument);
  ReadOptions as_bf16;
  as_bf16.u2_as_bf16 = true;
  EXPECT_TRUE(Decode(file, as_bf16).ok());
}

TEST(NpyTest, U1IsFp8OnlyWhenAskedAsTheDtypeAsked) {
  const Tensor e4m3 = Tensor::FromFloats(DType::kF8E4M3, {2, 2}, {1, -2, 0.5, 448});
  const std::string file = Encode(e4m3);
  EXPECT_NE(HeaderOf(file).find("'descr': '|u1'"), std::string::npos);
  absl::StatusOr<Tensor> plain = Decode(file);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plain.status().message().find("f8_e4m3"), std::string::npos) << plain.status();
  ReadOptions as_bf16;  // bf16 alone does not make '|u1' readable
  as_bf16.u2_as_bf16 = true;
  EXPECT_FALSE(Decode(file, as_bf16).ok());
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    ReadOptions options;
    options.u1_as_fp8 = dtype;
    absl::StatusOr<Tensor> back = Decode(file, options);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), dtype);  // the bits, as whichever fp8 was named
    EXPECT_EQ(back->bytes(), e4m3.bytes());
  }
  EXPECT_EQ(e4m3.ToFloats(), (std::vector<float>{1, -2, 0.5, 448}));
  ReadOptions not_fp8;
  not_fp8.u1_as_fp8 = DType::kI32;
  EXPECT_FALSE(Decode(file, not_fp8).ok());
}

TEST(NpyTest, BitsNotesNameTheDtypeAndItsPythonView) {
  EXPECT_EQ(BitsNote("out.npy", DType::kF32), "");
  EXPECT_NE(BitsNote("out.npy", DType::kBF16).find("'<u2'"), std::string::npos);
  EXPECT_NE(BitsNote("out.npy", DType::kF8E4M3).find("ml_dtypes.float8_e4m3fn"), std::string::npos);
  EXPECT_NE(BitsNote("out.npy", DType::kF8E5M2).find("ml_dtypes.float8_e5m2"), std::string::npos);
}

TEST(NpyTest, RejectsWhatItCannotRead) {
  const std::string data(24, '\0');
  const char* bad_headers[] = {
      "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",           // float64
      "{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }",           // big-endian
      "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",          // Fortran order
      "{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }",           // 28 bytes needed
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",        // negative dim
      "{'descr': '<f4', 'fortran_order': False}",                            // no shape
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }",  // structured
  };
  for (const char* header : bad_headers) {
    EXPECT_EQ(Decode(MakeFile(header, data)).status().code(), absl::StatusCode::kInvalidArgument)
        << header;
  }
  EXPECT_EQ(Decode("not a numpy file").status().code(), absl::StatusCode::kInvalidArgument);
  std::string truncated =
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data);
  EXPECT_EQ(Decode(truncated.substr(0, 40)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, FileRoundTripAndMissingFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("npy_test_" + std::to_string(getpid()) + ".npy"))
          .string();
  const Tensor tensor = RandomTensor(DType::kF32, {6, 7}, 11);
  ASSERT_TRUE(Write(path, tensor).ok());
  absl::StatusOr<Tensor> back = Read(path);
  std::remove(path.c_str());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes(), tensor.bytes());
  absl::StatusOr<Tensor> missing = Read(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace kernelserve::npy
