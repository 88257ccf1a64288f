// proto/wire_check.h: the reason given for bytes that do not parse agrees with protobuf's own
// parser: a fault for every message it refuses, none for every message it takes.
#include "proto/wire_check.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::wire {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Buffer(const std::string& bytes, size_t split) {
  // Two slices, so that faults across a slice boundary are walked too.
  split = std::min(split, bytes.size());
  grpc::Slice slices[2] = {grpc::Slice(bytes.substr(0, split)), grpc::Slice(bytes.substr(split))};
  return grpc::ByteBuffer(slices, 2);
}

std::string Describe(const std::string& bytes, size_t split = 1) {
  return DescribeMalformed(Buffer(bytes, split), v1::ExecuteRequest::descriptor());
}

v1::ExecuteRequest Sample() {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  request.set_request_id("r-1");
  v1::Tensor& q = (*request.mutable_inputs())["q"];
  q.set_dtype(v1::DTYPE_BF16);
  for (int64_t d : {1, 3, 2, 8}) q.add_shape(d);
  q.set_data(std::string(96, 'x'));
  request.mutable_flash_attention()->set_causal(true);
  request.mutable_flash_attention()->set_softmax_scale(0.25);
  request.mutable_config()->set_block_q(64);
  request.mutable_policy()->set_allow_autotune(true);
  return request;
}

TEST(WireCheckTest, NamesTheFirstFault) {
  EXPECT_THAT(Describe("\x0a\x05" "ab"), HasSubstr("field 1 (kernel) at byte 0: length 5"));
  EXPECT_THAT(Describe("\x0a\x02\xc3\x28"), HasSubstr("field 1 (kernel) at byte 0: not valid UTF-8"));
  EXPECT_THAT(Describe("\xff"), HasSubstr("malformed field tag at byte 0"));
  EXPECT_THAT(Describe(std::string("\x00\x01", 2)), HasSubstr("field number 0"));
  EXPECT_THAT(Describe("\x0f"), HasSubstr("invalid wire type 7"));
  EXPECT_THAT(Describe("\x0c"), HasSubstr("end-group tag without its start"));
  EXPECT_THAT(Describe("\x10\x80"), HasSubstr("malformed or truncated varint"));
  // A map entry whose Tensor has a packed shape cut short.
  EXPECT_THAT(Describe("\x12\x07\x0a\x01x\x12\x02\x12\x01\x80"), HasSubstr("(shape)"));
  EXPECT_EQ(Describe(Sample().SerializeAsString()), "");
  EXPECT_EQ(Describe(""), "");
}

// Tags and lengths as protobuf reads them, not as plain varints: a tag keeps the low 32 bits of
// its 5 bytes, a length takes at most 5 bytes. wire_fuzz found the first (a fault was named in
// bytes protobuf takes).
TEST(WireCheckTest, TagsAndLengthsAreReadAsProtobufReadsThem) {
  // Field 2^28 (unknown), its tag written in 5 bytes whose last one has bits past the 32nd.
  const std::string long_tag = std::string("\x80\x80\x80\x80\x18\x01", 6);
  v1::ExecuteRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(long_tag));
  EXPECT_EQ(Describe(long_tag, 3), "");
  // The kernel name, its length 1 written in 6 bytes.
  const std::string long_length = std::string("\x0a\x81\x80\x80\x80\x80\x00x", 8);
  ASSERT_FALSE(parsed.ParseFromString(long_length));
  EXPECT_THAT(Describe(long_length), HasSubstr("field 1 (kernel) at byte 0: malformed length"));
  // In 5 bytes it is a length.
  const std::string five_bytes = std::string("\x0a\x81\x80\x80\x80\x00x", 7);
  ASSERT_TRUE(parsed.ParseFromString(five_bytes));
  EXPECT_EQ(Describe(five_bytes), "");
}

// Random byte edits of a valid request: whenever protobuf refuses the bytes a fault is named,
// and whenever it takes them none is.
TEST(WireCheckTest, AgreesWithProtobufOnMutatedRequests) {
  const google::protobuf::LogSilencer quiet;  // protobuf logs each invalid UTF-8 string
  const std::string valid = Sample().SerializeAsString();
  std::mt19937 rng(7);
  int refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.erase(at, 1 + rng() % 3);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(rng()));
      }
      if (bytes.empty()) bytes = "\x01";
    }
    v1::ExecuteRequest parsed;
    const bool ok = parsed.ParseFromString(bytes);
    const std::string fault = Describe(bytes, rng() % (bytes.size() + 1));
    if (ok) {
      EXPECT_EQ(fault, "") << "protobuf took bytes described as malformed, trial " << trial;
    } else {
      ++refused;
      EXPECT_NE(fault, "") << "no fault named for bytes protobuf refused, trial " << trial;
    }
  }
  EXPECT_GT(refused, 1000);  // the mutations do exercise the refusals
}

}  // namespace
}  // namespace kernelserve::wire
