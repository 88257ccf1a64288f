// Conversions between the wire messages (kernelserve.v1) and the core types. Used by the
// server and the C++ client; the only place that knows both.
#ifndef KERNELSERVE_PROTO_CONVERT_H_
#define KERNELSERVE_PROTO_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/config_schema.h"
#include "core/config_source.h"
#include "core/kernel_config.h"
#include "core/policy.h"
#include "core/schema.h"
#include "core/tensor.h"
#include "core/timings.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/tensor_wire.h"

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
// Like PutTensor, except that bytes a HostBuffer holds stay in it: `proto` gets dtype and shape,
// and `buffers` (non-null) the buffer under `proto` (for wire::SerializeResponse to send).
void PutTensor(Tensor tensor, v1::Tensor* proto, wire::TensorBuffers* buffers);
// TakeTensor over a map of inputs, each named "input 'NAME'" in errors. The data is moved out.
// A tensor listed in `buffers` (nullable; see wire::TensorBuffers, whose keys must point into
// `protos`) takes its bytes from its buffer, which the Tensor then holds. An input that
// `schema` (nullable) marks shape_only and that comes with empty data (and no buffer) becomes
// a Tensor::ShapeOnly.
absl::StatusOr<TensorMap> TakeTensors(google::protobuf::Map<std::string, v1::Tensor>* protos,
                                      const wire::TensorBuffers* buffers = nullptr,
                                      const KernelSchema* schema = nullptr);
// SpecFromProto over a map of inputs (shapes only allowed).
absl::StatusOr<TensorSpecMap> SpecsFromProto(
    const google::protobuf::Map<std::string, v1::Tensor>& protos);

KernelConfig FromProto(const v1::KernelConfig& proto);
v1::KernelConfig ToProto(const KernelConfig& config);
// OK unless `proto` sets what is no longer a config field (backend); InvalidArgument naming it
// otherwise. Servers check each request's config with it.
absl::Status CheckConfigProto(const v1::KernelConfig& proto);
// One field of a platform's config schema, for ListKernels.
v1::ConfigFieldInfo ToProto(const ConfigFieldSchema& field);
// True when any field of the wire config is set (an explicit override).
bool IsSet(const v1::KernelConfig& proto);

v1::ConfigSource ToProto(ConfigSource source);
// The params of a kernel call request (ExecuteRequest, ExecuteBatchRequest, AutotuneRequest,
// PutConfigRequest), for the kernel's schema to check: the fields of its typed `params` member
// (those set; zero counts as unset for fields without presence) and its `parameters` map.
// InvalidArgument when the typed member belongs to another kernel than request.kernel, when a
// param is given in both, or when a value is empty or of a type params cannot have.
absl::StatusOr<Attributes> ParamsFromProto(const google::protobuf::Message& request);
// The params of a request whose typed `params` member is unset: its `parameters` map alone, read
// as the generated map it is (reflection over a map field copies it into a repeated field of
// entries first: most of ParamsFromProto's time on a tiny call). InvalidArgument as above.
absl::StatusOr<Attributes> ParamsFromProto(
    const google::protobuf::Map<std::string, v1::ParamValue>& parameters);
// One param value; InvalidArgument naming `name` when `proto` holds none.
absl::StatusOr<AttrValue> FromProto(const v1::ParamValue& proto, const std::string& name);
v1::ParamValue ToProto(const AttrValue& value);
// The schema of a kernel for ListKernels: every schema field, the ArgInfo summaries, and
// params_field (the member of the requests' `params` oneof named as the kernel, if any).
void ToProto(const KernelSchema& schema, v1::KernelInfo* info);
PolicyPatch FromProto(const v1::TuningPolicy& policy);
void ToProto(const Timings& timings, v1::Timing* proto);

}  // namespace kernelserve

#endif  // KERNELSERVE_PROTO_CONVERT_H_
