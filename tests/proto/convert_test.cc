#include "proto/convert.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

v1::Tensor MakeProto(v1::DType dtype, std::initializer_list<int64_t> shape, size_t bytes) {
  v1::Tensor proto;
  proto.set_dtype(dtype);
  for (int64_t d : shape) proto.add_shape(d);
  proto.set_data(std::string(bytes, '\x5a'));
  return proto;
}

TEST(ConvertTest, DTypeRoundTrips) {
  for (DType dtype : kAllDTypes) {
    absl::StatusOr<DType> back = FromProto(ToProto(dtype), "t");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, dtype);
  }
  // The wire numbers are the contract's: never renumbered.
  EXPECT_EQ(ToProto(DType::kBool), 6);
  EXPECT_EQ(ToProto(DType::kF8E4M3), 7);
  EXPECT_EQ(ToProto(DType::kF8E5M2), 8);
  EXPECT_EQ(v1::DTYPE_F8_E4M3, 7);
  EXPECT_EQ(v1::DTYPE_F8_E5M2, 8);
}

TEST(ConvertTest, Fp8TensorsRoundTripKeepingEveryCode) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    std::string codes(256, '\0');
    for (int i = 0; i < 256; ++i) codes[static_cast<size_t>(i)] = static_cast<char>(i);
    absl::StatusOr<Tensor> original = Tensor::FromBytes(dtype, {4, 64}, codes);
    ASSERT_TRUE(original.ok()) << original.status();
    v1::Tensor proto;
    PutTensor(*original, &proto);
    EXPECT_EQ(proto.dtype(), dtype == DType::kF8E4M3 ? v1::DTYPE_F8_E4M3 : v1::DTYPE_F8_E5M2);
    EXPECT_EQ(proto.data().size(), 256u);  // one byte an element
    absl::StatusOr<Tensor> back = TakeTensor(&proto, "input 'kv'");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), dtype);
    EXPECT_EQ(back->shape(), (Shape{4, 64}));
    EXPECT_EQ(back->bytes(), codes);
  }
  // The byte count is checked at one byte an element.
  v1::Tensor short_data = MakeProto(v1::DTYPE_F8_E4M3, {2, 3}, 5);
  absl::StatusOr<Tensor> refused = TakeTensor(&short_data, "input 'kv'");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("f8_e4m3[2,3]"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("6 bytes"), std::string::npos) << refused.status();
}

TEST(ConvertTest, UnspecifiedDTypeIsInvalidAndNamesTheInput) {
  v1::Tensor proto = MakeProto(v1::DTYPE_UNSPECIFIED, {2}, 8);
  absl::StatusOr<Tensor> t = TakeTensor(&proto, "input 'x'");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("input 'x'"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("unspecified"), std::string::npos) << t.status();
}

TEST(ConvertTest, UnknownDTypeIsInvalid) {
  absl::StatusOr<DType> d = FromProto(static_cast<v1::DType>(42), "input 'q'");
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("input 'q'"), std::string::npos);
  EXPECT_NE(d.status().message().find("f8_e4m3, f8_e5m2"), std::string::npos) << d.status();
}

TEST(ConvertTest, NegativeDimIsInvalid) {
  v1::Tensor proto = MakeProto(v1::DTYPE_F32, {2, -3}, 0);
  absl::StatusOr<Tensor> t = TakeTensor(&proto, "input 'k'");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("input 'k'"), std::string::npos);
  EXPECT_NE(t.status().message().find("negative"), std::string::npos);
  EXPECT_EQ(SpecFromProto(proto, "input 'k'").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConvertTest, ShapeOverflowIsInvalid) {
  const int64_t big = int64_t{1} << 32;
  v1::Tensor proto = MakeProto(v1::DTYPE_F32, {big, big}, 0);
  absl::StatusOr<Tensor> t = TakeTensor(&proto, "input 'v'");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("input 'v'"), std::string::npos);
  EXPECT_NE(t.status().message().find("overflow"), std::string::npos);
  // The element count fits but the byte count does not.
  v1::Tensor bytes_overflow =
      MakeProto(v1::DTYPE_I64, {std::numeric_limits<int64_t>::max() / 4}, 0);
  EXPECT_EQ(SpecFromProto(bytes_overflow, "input 'v'").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConvertTest, WrongByteCountIsInvalidAndNamesBothSizes) {
  v1::Tensor proto = MakeProto(v1::DTYPE_BF16, {2, 3}, 11);
  absl::StatusOr<Tensor> t = TakeTensor(&proto, "input 'x'");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("input 'x'"), std::string::npos);
  EXPECT_NE(t.status().message().find("12"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("11"), std::string::npos) << t.status();
  v1::Tensor boolean = MakeProto(v1::DTYPE_BOOL, {5}, 5);
  EXPECT_TRUE(TakeTensor(&boolean, "input 'mask'").ok());
}

TEST(ConvertTest, TensorRoundTripKeepsBytes) {
  Tensor original = RandomTensor(DType::kF16, {3, 4, 5}, 7);
  const std::string bytes(original.bytes());
  v1::Tensor proto;
  PutTensor(original, &proto);
  EXPECT_EQ(proto.dtype(), v1::DTYPE_F16);
  ASSERT_EQ(proto.shape_size(), 3);
  EXPECT_EQ(proto.shape(2), 5);
  absl::StatusOr<Tensor> back = TakeTensor(&proto, "input 'x'");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes(), bytes);
  EXPECT_EQ(back->shape(), (Shape{3, 4, 5}));
  EXPECT_TRUE(proto.data().empty());
}

TEST(ConvertTest, SpecAllowsEmptyDataButChecksNonEmpty) {
  v1::Tensor shapes_only = MakeProto(v1::DTYPE_F32, {4, 8}, 0);
  absl::StatusOr<TensorSpec> spec = SpecFromProto(shapes_only, "input 'x'");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, (TensorSpec{DType::kF32, {4, 8}}));
  v1::Tensor short_data = MakeProto(v1::DTYPE_F32, {4, 8}, 100);
  EXPECT_EQ(SpecFromProto(short_data, "input 'x'").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A map of inputs: specs by name, and an error that names its input as a single check would.
TEST(ConvertTest, SpecsOfAMapNameTheBadInput) {
  google::protobuf::Map<std::string, v1::Tensor> inputs;
  inputs["x"] = MakeProto(v1::DTYPE_F32, {4, 8}, 0);
  inputs["cu_seqlens"] = MakeProto(v1::DTYPE_I32, {3}, 12);
  absl::StatusOr<TensorSpecMap> specs = SpecsFromProto(inputs);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(specs->at("x"), (TensorSpec{DType::kF32, {4, 8}}));
  EXPECT_EQ(specs->at("cu_seqlens"), (TensorSpec{DType::kI32, {3}}));
  inputs["bad"] = MakeProto(v1::DTYPE_F32, {2}, 7);
  specs = SpecsFromProto(inputs);
  ASSERT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(specs.status().message(),
            SpecFromProto(inputs["bad"], "input 'bad'").status().message());
  EXPECT_TRUE(absl::StartsWith(specs.status().message(), "input 'bad': ")) << specs.status();
}

TEST(ConvertTest, TakeTensorsNamesTheBadInput) {
  google::protobuf::Map<std::string, v1::Tensor> inputs;
  inputs["q"] = MakeProto(v1::DTYPE_F32, {2}, 8);
  inputs["bias"] = MakeProto(v1::DTYPE_F32, {2}, 7);
  absl::StatusOr<TensorMap> tensors = TakeTensors(&inputs);
  ASSERT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.status().message().find("input 'bias'"), std::string::npos);
}

TEST(ConvertTest, KernelConfigRoundTrips) {
  KernelConfig config;
  config.block_q = 64;
  config.block_k = 32;
  config.block_d = 16;
  config.num_warps = 4;
  config.num_stages = 2;
  config.block_size = 128;
  config.platform = "cuda";
  config.algorithm = "split";
  config.priority = 3;
  config.named["lanes"] = 64;
  config.named["plan"] = int64_t{1} << 40;
  const v1::KernelConfig proto = ToProto(config);
  EXPECT_EQ(proto.fields().at("lanes"), 64);
  EXPECT_EQ(proto.fields().size(), 2u);
  EXPECT_EQ(FromProto(proto), config);
  EXPECT_TRUE(IsSet(proto));
  EXPECT_FALSE(IsSet(v1::KernelConfig()));
  v1::KernelConfig only_platform;
  only_platform.set_platform("cpu");
  EXPECT_TRUE(IsSet(only_platform));
  v1::KernelConfig only_named;
  (*only_named.mutable_fields())["threads"] = 2;
  EXPECT_TRUE(IsSet(only_named));
  EXPECT_EQ(FromProto(only_named).Named("threads"), 2);
}

// backend is no longer a config field: a request setting it is refused, naming what replaced it.
TEST(ConvertTest, ConfigWithABackendIsRefused) {
  v1::KernelConfig proto;
  proto.set_block_size(8);
  EXPECT_TRUE(CheckConfigProto(proto).ok());
  proto.set_backend("wmma");
  const absl::Status status = CheckConfigProto(proto);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config backend 'wmma': backend is no longer a config field (config schema 2); a "
            "kernel variant is 'algorithm', a platform's own fields are named in 'fields' "
            "(ListKernels lists them)");
}

TEST(ConvertTest, ConfigFieldSchemaToProto) {
  ConfigFieldSchema threads =
      IntConfigField("threads", 0, 1024, "0: one per hardware thread", "worker threads");
  v1::ConfigFieldInfo info = ToProto(threads);
  EXPECT_EQ(info.name(), "threads");
  EXPECT_EQ(info.kind(), "int");
  EXPECT_EQ(info.min(), 0);
  EXPECT_EQ(info.max(), 1024);
  EXPECT_EQ(info.default_value(), "0: one per hardware thread");
  EXPECT_EQ(info.doc(), "worker threads");
  EXPECT_TRUE(info.named());
  info = ToProto(ChoiceConfigField("algorithm", {"wgmma"}, "mma.sync", "the variant"));
  EXPECT_EQ(info.kind(), "choice");
  ASSERT_EQ(info.choices_size(), 1);
  EXPECT_EQ(info.choices(0), "wgmma");
  EXPECT_FALSE(info.named());
}

// Typed params become attributes by field name; zero (unset) fields without presence are left
// out, optional ones are taken when set; `parameters` add params of any kernel.
TEST(ConvertTest, ParamsComeFromTypedMessagesAndTheParametersMap) {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  EXPECT_TRUE(ParamsFromProto(request)->empty());
  request.mutable_mean_pooling()->set_chunk_size(16);
  EXPECT_EQ(*ParamsFromProto(request), (Attributes{{"chunk_size", int64_t{16}}}));

  v1::ExecuteRequest attention;
  attention.set_kernel("flash_attention@v1");
  v1::FlashAttentionParams* attn = attention.mutable_flash_attention();
  attn->set_causal(true);
  attn->set_softmax_scale(0.5f);
  attn->set_window_left(0);
  attn->set_logits_soft_cap(30.0f);
  attn->set_return_lse(true);
  (*attention.mutable_parameters())["extra"].set_string_value("x");
  const Attributes expected = {
      {"causal", true},          {"softmax_scale", 0.5}, {"window_left", int64_t{0}},
      {"logits_soft_cap", 30.0}, {"return_lse", true},   {"extra", std::string("x")}};
  EXPECT_EQ(*ParamsFromProto(attention), expected);
}

TEST(ConvertTest, ParamsGivenWrongAreInvalidArgument) {
  v1::ExecuteRequest other;
  other.set_kernel("mean_pooling");
  other.mutable_flash_attention()->set_causal(true);
  absl::StatusOr<Attributes> params = ParamsFromProto(other);
  EXPECT_EQ(params.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(params.status().message(),
            "params: flash_attention params given for kernel 'mean_pooling': expected its own "
            "params or parameters");
  v1::ExecuteRequest twice;
  twice.set_kernel("mean_pooling");
  twice.mutable_mean_pooling()->set_chunk_size(8);
  (*twice.mutable_parameters())["chunk_size"].set_int64_value(8);
  EXPECT_EQ(ParamsFromProto(twice).status().message(),
            "param 'chunk_size' given both in params and parameters");
  v1::AutotuneRequest empty;
  empty.set_kernel("mean_pooling");
  (*empty.mutable_parameters())["chunk_size"];
  EXPECT_EQ(ParamsFromProto(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

// The map alone (a request without typed params) converts as the whole request does.
TEST(ConvertTest, ParametersMapAloneEqualsTheRequestsParams) {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  auto& map = *request.mutable_parameters();
  map["causal"].set_bool_value(true);
  map["window_left"].set_int64_value(-3);
  map["softmax_scale"].set_double_value(0.25);
  map["note"].set_string_value("n");
  const Attributes expected = {{"causal", true},
                               {"window_left", int64_t{-3}},
                               {"softmax_scale", 0.25},
                               {"note", std::string("n")}};
  EXPECT_EQ(*ParamsFromProto(request.parameters()), expected);
  EXPECT_EQ(*ParamsFromProto(request), expected);
  EXPECT_TRUE(ParamsFromProto(v1::ExecuteRequest().parameters())->empty());
  map["empty"];
  absl::StatusOr<Attributes> bad = ParamsFromProto(request.parameters());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "param 'empty': no value (expected bool, int64, double or string)");
}

// The schema travels whole: what ListKernels shows is what the server checks.
TEST(ConvertTest, SchemaToKernelInfo) {
  KernelSchema schema;
  schema.name = "flash_attention";
  schema.version = 1;
  schema.inputs = {{"q", true, {DType::kF16, DType::kBF16}, {4}, "[B,S,H,D]", "queries"}};
  schema.outputs = {{"out", "dtype of q", "shape of q", "the output"}};
  schema.params = {{"window_left", ParamType::kInt, int64_t{-1}, -1.0, std::nullopt, "left"}};
  v1::KernelInfo info;
  ToProto(schema, &info);
  EXPECT_EQ(info.name(), "flash_attention");
  EXPECT_EQ(info.params_field(), "flash_attention");
  ASSERT_EQ(info.input_schema_size(), 1);
  EXPECT_EQ(info.input_schema(0).dtypes_size(), 2);
  EXPECT_EQ(info.input_schema(0).ranks(0), 4);
  ASSERT_EQ(info.param_schema_size(), 1);
  EXPECT_EQ(info.param_schema(0).type(), "int");
  EXPECT_EQ(info.param_schema(0).default_value().int64_value(), -1);
  EXPECT_TRUE(info.param_schema(0).has_min());
  EXPECT_FALSE(info.param_schema(0).has_max());
  ASSERT_EQ(info.inputs_size(), 1);
  EXPECT_EQ(info.inputs(0).doc(), "f16|bf16 [B,S,H,D]; queries");
  schema.name = "toy";
  v1::KernelInfo toy;
  ToProto(schema, &toy);
  EXPECT_EQ(toy.params_field(), "");
}

TEST(ConvertTest, PolicyAndSourcesAndTimings) {
  v1::TuningPolicy policy;
  policy.set_allow_autotune(false);
  PolicyPatch patch = FromProto(policy);
  EXPECT_EQ(patch.allow_autotune, std::optional<bool>(false));
  EXPECT_FALSE(patch.allow_heuristics.has_value());
  EXPECT_FALSE(patch.persist.has_value());

  EXPECT_EQ(ToProto(ConfigSource::kMemory), v1::CONFIG_SOURCE_MEMORY);
  EXPECT_EQ(ToProto(ConfigSource::kRedis), v1::CONFIG_SOURCE_REDIS);
  EXPECT_EQ(ToProto(ConfigSource::kFile), v1::CONFIG_SOURCE_FILE);
  EXPECT_EQ(ToProto(ConfigSource::kAutotune), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_EQ(ToProto(ConfigSource::kHeuristic), v1::CONFIG_SOURCE_HEURISTIC);
  EXPECT_EQ(ToProto(ConfigSource::kOverride), v1::CONFIG_SOURCE_OVERRIDE);
  EXPECT_EQ(ToProto(ConfigSource::kOverlay), v1::CONFIG_SOURCE_OVERLAY);

  Timings timings{
      .select_us = 1, .h2d_us = 2, .launch_us = 5, .kernel_us = 3, .d2h_us = 4, .total_us = 15};
  v1::Timing proto;
  ToProto(timings, &proto);
  EXPECT_EQ(proto.select_us(), 1);
  EXPECT_EQ(proto.h2d_us(), 2);
  EXPECT_EQ(proto.launch_us(), 5);
  EXPECT_EQ(proto.kernel_us(), 3);
  EXPECT_EQ(proto.d2h_us(), 4);
  EXPECT_EQ(proto.total_us(), 15);
}

}  // namespace
}  // namespace kernelserve
