// proto/kserve_convert.h and the fp8 dtypes: the Open Inference Protocol (KServe v2) has no fp8
// datatype, so every mapping that would need one refuses with a message that points at the
// kernelserve.v1 API, and a model that takes fp8 beside other dtypes lists one of the others.
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/kserve_convert.h"
#include "proto/parse.h"

namespace kernelserve::kserve {
namespace {

// True when `status` has `code` and its message names `what` and the kernelserve.v1 API.
::testing::AssertionResult PointsAtV1(const absl::Status& status, absl::StatusCode code,
                                      const std::string& what) {
  if (status.code() != code) {
    return ::testing::AssertionFailure() << "code " << status.code() << ": " << status;
  }
  for (const std::string& part :
       {what, std::string("kernelserve.v1"), std::string("no fp8 datatype")}) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "no '" << part << "' in " << status;
    }
  }
  return ::testing::AssertionSuccess();
}

KernelSchema CacheKernel(std::vector<DType> cache_dtypes, std::string out_dtype) {
  KernelSchema schema;
  schema.name = "cache_toy";
  schema.inputs = {{"q", true, {DType::kF16, DType::kBF16}, {3}, "[B,H,D]", "queries"},
                   {"kv", true, std::move(cache_dtypes), {4}, "[P,2,H,D]", "the cache"}};
  schema.outputs = {{"out", std::move(out_dtype), "shape of q", "", ""}};
  return schema;
}

TEST(KServeFp8Test, DatatypeNameAndConfigDataTypeRefuseFp8) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    const std::string name(DTypeName(dtype));
    EXPECT_TRUE(PointsAtV1(DatatypeName(dtype, "output 'kv'").status(),
                           absl::StatusCode::kUnimplemented, "output 'kv': " + name));
    EXPECT_TRUE(PointsAtV1(ConfigDataType(dtype, "input 'kv'").status(),
                           absl::StatusCode::kUnimplemented, "input 'kv': " + name));
  }
  // Every other dtype still has its datatype.
  for (DType dtype : kAllDTypes) {
    if (IsFp8(dtype)) continue;
    absl::StatusOr<std::string_view> name = DatatypeName(dtype, "x");
    ASSERT_TRUE(name.ok()) << name.status();
    absl::StatusOr<DType> back = DTypeFromDatatype(*name, "x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, dtype);
    EXPECT_TRUE(ConfigDataType(dtype, "x").ok());
  }
}

TEST(KServeFp8Test, AnFp8DatatypeInARequestIsInvalidAndPointsAtV1) {
  for (const char* datatype :
       {"FP8_E4M3", "FP8_E5M2", "FP8", "F8_E4M3", "fp8_e4m3fn", "FLOAT8_E5M2"}) {
    absl::StatusOr<DType> dtype = DTypeFromDatatype(datatype, "input 'kv'");
    EXPECT_TRUE(PointsAtV1(dtype.status(), absl::StatusCode::kInvalidArgument,
                           std::string("input 'kv': datatype '") + datatype + "'"));
  }
  // Any other unknown text keeps the plain list of the datatypes served.
  absl::StatusOr<DType> other = DTypeFromDatatype("FP64", "input 'x'");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("expected one of FP32"), std::string::npos)
      << other.status();
}

TEST(KServeFp8Test, ARequestWithAnFp8DatatypeIsRefusedNamingTheInput) {
  const KernelSchema schema = CacheKernel({DType::kF16, DType::kF8E4M3}, "dtype of q");
  inference::ModelInferRequest request;
  request.set_model_name(schema.name);
  auto* q = request.add_inputs();
  q->set_name("q");
  q->set_datatype("FP16");
  for (int64_t d : {1, 2, 4}) q->add_shape(d);
  auto* kv = request.add_inputs();
  kv->set_name("kv");
  kv->set_datatype("FP8_E4M3");
  for (int64_t d : {1, 2, 2, 4}) kv->add_shape(d);
  request.add_raw_input_contents(std::string(16, '\0'));
  request.add_raw_input_contents(std::string(16, '\0'));
  absl::StatusOr<InferCall> call = FromInferRequest(&request, schema);
  EXPECT_TRUE(PointsAtV1(call.status(), absl::StatusCode::kInvalidArgument, "'kv'"));
}

TEST(KServeFp8Test, MetadataListsTheFirstDtypeTheProtocolHas) {
  // kv takes f8_e4m3 first, then f16: listed as FP16.
  const KernelSchema schema = CacheKernel({DType::kF8E4M3, DType::kF16}, "dtype of kv");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(ToModelMetadata(schema, &metadata).ok());
  ASSERT_EQ(metadata.inputs_size(), 2);
  EXPECT_EQ(metadata.inputs(1).name(), "kv");
  EXPECT_EQ(metadata.inputs(1).datatype(), "FP16");
  EXPECT_EQ(metadata.outputs(0).datatype(), "FP16");
  inference::ModelConfig config;
  ASSERT_TRUE(ToModelConfig(schema, &config).ok());
  EXPECT_EQ(config.input(1).data_type(), inference::TYPE_FP16);
  EXPECT_EQ(config.output(0).data_type(), inference::TYPE_FP16);
}

TEST(KServeFp8Test, MetadataOfAnInputOrOutputOfFp8AloneIsUnimplemented) {
  const KernelSchema fp8_input = CacheKernel({DType::kF8E4M3, DType::kF8E5M2}, "dtype of q");
  inference::ModelMetadataResponse metadata;
  EXPECT_TRUE(PointsAtV1(ToModelMetadata(fp8_input, &metadata), absl::StatusCode::kUnimplemented,
                         "'kv': f8_e4m3"));
  inference::ModelConfig config;
  EXPECT_TRUE(PointsAtV1(ToModelConfig(fp8_input, &config), absl::StatusCode::kUnimplemented,
                         "input 'kv': f8_e4m3"));
  const KernelSchema fp8_output = CacheKernel({DType::kF16}, "f8_e5m2");
  metadata.Clear();
  EXPECT_TRUE(PointsAtV1(ToModelMetadata(fp8_output, &metadata), absl::StatusCode::kUnimplemented,
                         "'out': f8_e5m2"));
  config.Clear();
  EXPECT_TRUE(PointsAtV1(ToModelConfig(fp8_output, &config), absl::StatusCode::kUnimplemented,
                         "output 'out': f8_e5m2"));
}

TEST(KServeFp8Test, AnAnswerWithAnFp8OutputIsUnimplemented) {
  const KernelSchema schema = CacheKernel({DType::kF16, DType::kF8E4M3}, "dtype of kv");
  v1::ExecuteResponse response;
  v1::Tensor& out = (*response.mutable_outputs())["out"];
  out.set_dtype(v1::DTYPE_F8_E4M3);
  out.add_shape(4);
  out.set_data(std::string(4, '\x38'));
  absl::StatusOr<WireMessage> answer = ToInferResponse(&response, schema, {}, "id-1");
  EXPECT_TRUE(
      PointsAtV1(answer.status(), absl::StatusCode::kUnimplemented, "output 'out': f8_e4m3"));
}

}  // namespace
}  // namespace kernelserve::kserve
