// Conversions between the wire messages (kernelserve.v1) and the core types. Used by the
// server and the C++ client; the only place that knows both.
#ifndef KERNELSERVE_PROTO_CONVERT_H_
#define KERNELSERVE_PROTO_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/config_source.h"
#include "core/executor.h"
#include "core/kernel_config.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve {

// Wire dtype <-> core dtype. DTYPE_UNSPECIFIED or unknown -> InvalidArgument naming `what`.
absl::StatusOr<DType> FromProto(v1::DType dtype, const std::string& what);
v1::DType ToProto(DType dtype);

// Checks dims (>= 0, product without overflow) and the byte count, then takes the bytes out
// of `proto` (moved, not copied). `what` names the tensor in errors ("input 'q'").
absl::StatusOr<Tensor> TakeTensor(v1::Tensor* proto, const std::string& what);
// Checks like TakeTensor but keeps the data and allows empty data (shapes only).
absl::StatusOr<TensorSpec> SpecFromProto(const v1::Tensor& proto, const std::string& what);
// Moves the tensor's bytes into `proto`.
void PutTensor(Tensor tensor, v1::Tensor* proto);
// TakeTensor over a map of inputs, each named "input 'NAME'" in errors. The data is moved out.
absl::StatusOr<TensorMap> TakeTensors(google::protobuf::Map<std::string, v1::Tensor>* protos);
// SpecFromProto over a map of inputs (shapes only allowed).
absl::StatusOr<TensorSpecMap> SpecsFromProto(
    const google::protobuf::Map<std::string, v1::Tensor>& protos);

KernelConfig FromProto(const v1::KernelConfig& proto);
v1::KernelConfig ToProto(const KernelConfig& config);
// True when any field of the wire config is set (an explicit override).
bool IsSet(const v1::KernelConfig& proto);

v1::ConfigSource ToProto(ConfigSource source);
// The attributes of a call from its params oneof (mean_pooling or flash_attention).
Attributes MeanPoolingAttributes(const v1::MeanPoolingParams& params);
Attributes FlashAttentionAttributes(const v1::FlashAttentionParams& params);
PolicyPatch FromProto(const v1::TuningPolicy& policy);
void ToProto(const Timings& timings, v1::Timing* proto);

}  // namespace kernelserve

#endif  // KERNELSERVE_PROTO_CONVERT_H_
