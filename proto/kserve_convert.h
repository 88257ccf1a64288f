// Conversions between the Open Inference Protocol (KServe v2, package inference) and the
// native messages and kernel schemas. A kernel is a model named as the kernel, version "1";
// every mapping is driven by the kernel's schema, so no kernel is named here.
#ifndef KERNELSERVE_PROTO_KSERVE_CONVERT_H_
#define KERNELSERVE_PROTO_KSERVE_CONVERT_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/schema.h"
#include "inference/grpc_service.pb.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/region_ref.h"
#include "proto/tensor_wire.h"

namespace kernelserve::kserve {

// The one version every model has.
inline constexpr std::string_view kModelVersion = "1";

// The protocol has no fp8 datatype: what follows "WHAT: f8_e4m3" in the message of a call or
// listing that would need one.
inline constexpr std::string_view kNoFp8InV2 =
    ": the Open Inference Protocol (KServe v2) has no fp8 datatype; send f8_e4m3 and f8_e5m2 "
    "tensors through the kernelserve.v1 API (kernelserve.v1.KernelService, e.g. Execute)";

// "FP32" <-> DType. DTypeFromDatatype: InvalidArgument naming `what` and the datatypes served
// for any other text (for an fp8-like name, "FP8_E4M3", pointing at the kernelserve.v1 API).
// DatatypeName and ConfigDataType: Unimplemented naming `what` for kF8E4M3 and kF8E5M2,
// which the protocol lacks, pointing at the kernelserve.v1 API.
absl::StatusOr<DType> DTypeFromDatatype(std::string_view datatype, std::string_view what);
absl::StatusOr<std::string_view> DatatypeName(DType dtype, std::string_view what);
absl::StatusOr<inference::DataType> ConfigDataType(DType dtype, std::string_view what);

// OK for "" and kModelVersion; NotFound naming the model and version otherwise.
absl::Status CheckVersion(std::string_view model, std::string_view version);

// The dtype and rank a model lists for a tensor: an input's first dtype the protocol has (not
// fp8; fp8 when the input takes nothing else) and its largest rank;
// an output's from its schema text ("f32", "dtype of q"; "[B,H]", "shape of q"). The kernel
// accepts the other dtypes and ranks of its schema too. InvalidArgument when the schema text
// is neither form (a kernel to fix).
struct TensorListing {
  DType dtype = DType::kF32;
  int rank = 0;
};
TensorListing ListInput(const InputSchema& input);
absl::StatusOr<TensorListing> ListOutput(const KernelSchema& schema, const OutputSchema& output);

// ModelMetadata and ModelConfig of the kernel (dims -1: any size; max_batch_size 0: the
// kernel's shapes carry their batch dimension).
absl::Status ToModelMetadata(const KernelSchema& schema, inference::ModelMetadataResponse* out);
absl::Status ToModelConfig(const KernelSchema& schema, inference::ModelConfig* out);

// A ModelInferRequest as the native request of the same call, and what the answer needs.
struct InferCall {
  // kernel, inputs (bytes moved in; those in shared memory with dtype and shape alone),
  // parameters, request_id.
  v1::ExecuteRequest request;
  std::vector<std::string> outputs;   // the outputs asked for, in request order; empty = all
  std::optional<int64_t> timeout_us;  // the protocol's `timeout` parameter; 0 = none (nullopt)
  RegionRefs input_regions;           // inputs that live in shared memory
  RegionRefs output_regions;          // outputs to write into shared memory
  // Inputs whose bytes are in a host buffer (their request tensor's data is empty), by name.
  std::map<std::string, std::shared_ptr<HostBuffer>> input_buffers;
};

// Converts `request` for the kernel of `schema` (its model_name), moving the tensor bytes out
// of it. Inputs: every name an input of the schema, given once, with a served datatype; data
// from raw_input_contents (one entry per input, in input order) or from typed contents (FP32,
// INT32, INT64, BOOL), or a shared-memory reference (input_regions; no raw entry). Parameters:
// the schema's params with their typed values (checked by the schema when planned), the
// protocol's reserved ones ignored but `timeout` (microseconds). InvalidArgument naming the
// input, output or parameter at fault. An entry of raw_input_contents that `raw_buffers`
// (nullable; see wire::RawBuffers) holds in a buffer goes to input_buffers, not copied.
absl::StatusOr<InferCall> FromInferRequest(inference::ModelInferRequest* request,
                                           const KernelSchema& schema,
                                           const wire::RawBuffers* raw_buffers = nullptr);

// A message serialized in pieces, in order: what grpc::ByteBuffer takes. Large tensor bytes
// have slices of their own (not copied). A value type.
struct WireMessage {
  std::vector<grpc::Slice> slices;
  size_t bytes = 0;  // in all slices

  // The slices as gRPC sends them (each slice shared, none copied).
  grpc::ByteBuffer ToByteBuffer() const { return grpc::ByteBuffer(slices.data(), slices.size()); }
};

// The native answer as the bytes of a ModelInferResponse: the outputs asked for (all produced
// when `outputs` is empty) in the schema's order with their bytes moved into
// raw_output_contents, and every other field of the answer as a response parameter
// (config_source, cache_key, platform, device, device_fingerprint, config, the timing fields as
// *_us, warnings). An output of `output_regions` (its bytes written there already) gets an
// empty raw entry and its region, offset and byte size as parameters. InvalidArgument naming an
// output asked for that the call did not produce; Unimplemented for an fp8 output (no
// datatype: kNoFp8InV2); ResourceExhausted over 2 GiB. An output whose
// bytes `buffers` (nullable; keys into `response`) holds in a host buffer is sent from it (a
// large one without a copy; the slice holds the buffer until gRPC lets go).
absl::StatusOr<WireMessage> ToInferResponse(v1::ExecuteResponse* response,
                                            const KernelSchema& schema,
                                            const std::vector<std::string>& outputs,
                                            std::string_view id,
                                            const RegionRefs& output_regions = {},
                                            const wire::TensorBuffers* buffers = nullptr);

// Makes `message` field `number` (length-delimited) of an enclosing message, whose only field
// it is: e.g. ModelStreamInferResponse.infer_response around a ToInferResponse.
void NestAs(uint32_t number, WireMessage* message);

}  // namespace kernelserve::kserve

#endif  // KERNELSERVE_PROTO_KSERVE_CONVERT_H_
