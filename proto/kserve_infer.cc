// The call side of the Open Inference Protocol mapping: ModelInferRequest to the native
// ExecuteRequest (the answer is proto/kserve_answer.cc).
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"
#include "proto/kserve_convert.h"

namespace kernelserve::kserve {
namespace {

using inference::InferParameter;
using inference::ModelInferRequest;
using ParameterMap = google::protobuf::Map<std::string, InferParameter>;

// Request parameters the protocol reserves: read (timeout) or ignored (a kernel call has no
// sequence, priority or headers of its own), never taken for kernel params.
bool Reserved(std::string_view name) {
  static const absl::flat_hash_set<std::string_view> kReserved = {
      "sequence_id", "sequence_start", "sequence_end",      "priority",
      "timeout",     "headers",        "binary_data_output"};
  return kReserved.contains(name) || absl::StartsWith(Sv(name), "triton_");
}

// A non-negative int64_param or uint64_param named `name` of `what`.
absl::StatusOr<uint64_t> SizeParameter(const InferParameter& value, std::string_view name,
                                       std::string_view what) {
  if (value.has_int64_param() && value.int64_param() >= 0) {
    return static_cast<uint64_t>(value.int64_param());
  }
  if (value.has_uint64_param()) return value.uint64_param();
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(what), ": parameter '", Sv(name), "': expected a non-negative int64_param"));
}

// The shared-memory reference of a tensor's `parameters`, if it has one.
absl::StatusOr<std::optional<RegionRef>> RegionOf(const ParameterMap& parameters,
                                                  std::string_view what) {
  auto region = parameters.find("shared_memory_region");
  if (region == parameters.end()) {
    for (const char* name : {"shared_memory_offset", "shared_memory_byte_size"}) {
      if (parameters.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Sv(what), ": parameter '", name, "' without shared_memory_region"));
      }
    }
    return std::nullopt;
  }
  if (!region->second.has_string_param() || region->second.string_param().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), ": parameter 'shared_memory_region': expected the region's name"));
  }
  RegionRef ref;
  ref.region = region->second.string_param();
  auto size = parameters.find("shared_memory_byte_size");
  if (size == parameters.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), ": expected parameter 'shared_memory_byte_size' with the region"));
  }
  KS_ASSIGN_OR_RETURN(ref.byte_size, SizeParameter(size->second, size->first, what));
  if (auto offset = parameters.find("shared_memory_offset"); offset != parameters.end()) {
    KS_ASSIGN_OR_RETURN(ref.offset, SizeParameter(offset->second, offset->first, what));
  }
  return ref;
}

template <typename T>
void AppendValues(const google::protobuf::RepeatedField<T>& values, std::string* bytes) {
  bytes->resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes->data(), values.data(), bytes->size());
}

// The little-endian bytes of typed `contents` of `dtype`.
absl::StatusOr<std::string> ContentBytes(const inference::InferTensorContents& contents,
                                         DType dtype, std::string_view what) {
  std::string bytes;
  switch (dtype) {
    case DType::kF32:
      AppendValues(contents.fp32_contents(), &bytes);
      return bytes;
    case DType::kI32:
      AppendValues(contents.int_contents(), &bytes);
      return bytes;
    case DType::kI64:
      AppendValues(contents.int64_contents(), &bytes);
      return bytes;
    case DType::kBool:
      bytes.reserve(static_cast<size_t>(contents.bool_contents_size()));
      for (bool b : contents.bool_contents()) bytes.push_back(b ? 1 : 0);
      return bytes;
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:  // not reached: DTypeFromDatatype has no fp8
    case DType::kF8E5M2:
      break;
  }
  KS_ASSIGN_OR_RETURN(const std::string_view datatype, DatatypeName(dtype, what));
  return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": ", Sv(datatype),
                                                 " has no typed contents field; send its bytes "
                                                 "in raw_input_contents"));
}

// The native value of kernel param `name`.
absl::StatusOr<v1::ParamValue> ParamValueOf(const InferParameter& value, const std::string& name) {
  v1::ParamValue out;
  switch (value.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      out.set_bool_value(value.bool_param());
      return out;
    case InferParameter::kInt64Param:
      out.set_int64_value(value.int64_param());
      return out;
    case InferParameter::kUint64Param:
      if (value.uint64_param() > static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", name, "': ", value.uint64_param(), " is out of range"));
      }
      out.set_int64_value(static_cast<int64_t>(value.uint64_param()));
      return out;
    case InferParameter::kDoubleParam:
      out.set_double_value(value.double_param());
      return out;
    case InferParameter::kStringParam:
      out.set_string_value(value.string_param());
      return out;
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "': no value"));
}

// The `timeout` parameter in microseconds (>= 0); nullopt for 0, which the protocol (and
// Triton) reads as no timeout. Values past int64 saturate.
absl::StatusOr<std::optional<int64_t>> TimeoutOf(const InferParameter& value) {
  std::optional<int64_t> timeout;
  if (value.has_int64_param() && value.int64_param() >= 0) {
    timeout = value.int64_param();
  } else if (value.has_uint64_param()) {
    timeout = static_cast<int64_t>(
        std::min<uint64_t>(value.uint64_param(), static_cast<uint64_t>(INT64_MAX)));
  }
  if (timeout.has_value()) return *timeout == 0 ? std::nullopt : timeout;
  return absl::InvalidArgumentError(
      "parameter 'timeout': expected microseconds as a non-negative int64_param");
}

absl::Status TakeParameters(ModelInferRequest& request, InferCall& call) {
  for (const auto& [name, value] : request.parameters()) {
    if (name == "timeout") {
      KS_ASSIGN_OR_RETURN(call.timeout_us, TimeoutOf(value));
      continue;
    }
    if (Reserved(name)) continue;
    KS_ASSIGN_OR_RETURN((*call.request.mutable_parameters())[name], ParamValueOf(value, name));
  }
  return absl::OkStatus();
}

absl::Status TakeInputs(const KernelSchema& schema, ModelInferRequest& request,
                        const wire::RawBuffers* raw_buffers, InferCall& call) {
  v1::ExecuteRequest& out = call.request;
  int without_contents = 0;
  for (const ModelInferRequest::InferInputTensor& input : request.inputs()) {
    if (!input.has_contents() && !input.parameters().contains("shared_memory_region")) {
      ++without_contents;
    }
  }
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != without_contents) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents: ", request.raw_input_contents_size(), " entries for ",
                     without_contents,
                     " inputs without typed contents; expected one per input, in input order"));
  }
  int raw = 0;
  for (ModelInferRequest::InferInputTensor& input : *request.mutable_inputs()) {
    const std::string what = absl::StrCat("input '", input.name().substr(0, 64), "'");
    if (schema.FindInput(input.name()) == nullptr) {
      std::vector<std::string> names;
      for (const InputSchema& known : schema.inputs) names.push_back(known.name);
      return absl::InvalidArgumentError(absl::StrCat(what, " is not an input of model '",
                                                     schema.name, "'; its inputs are ",
                                                     absl::StrJoin(names, ", ")));
    }
    KS_ASSIGN_OR_RETURN(std::optional<RegionRef> region, RegionOf(input.parameters(), what));
    KS_ASSIGN_OR_RETURN(const DType dtype, DTypeFromDatatype(input.datatype(), what));
    if (out.inputs().contains(input.name())) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": given twice"));
    }
    v1::Tensor& tensor = (*out.mutable_inputs())[input.name()];
    tensor.set_dtype(ToProto(dtype));
    tensor.mutable_shape()->CopyFrom(input.shape());
    if (region.has_value()) {
      call.input_regions[input.name()] = *std::move(region);
    } else if (input.has_contents()) {
      KS_ASSIGN_OR_RETURN(*tensor.mutable_data(), ContentBytes(input.contents(), dtype, what));
    } else if (raw < request.raw_input_contents_size()) {
      if (raw_buffers != nullptr && static_cast<size_t>(raw) < raw_buffers->size() &&
          (*raw_buffers)[raw] != nullptr) {
        call.input_buffers[input.name()] = (*raw_buffers)[raw];  // the entry itself is empty
      }
      tensor.mutable_data()->swap(*request.mutable_raw_input_contents(raw++));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no data: expected an entry of raw_input_contents or contents"));
    }
  }
  return absl::OkStatus();
}

absl::Status TakeOutputs(const KernelSchema& schema, const ModelInferRequest& request,
                         InferCall& call) {
  for (const ModelInferRequest::InferRequestedOutputTensor& output : request.outputs()) {
    const std::string what = absl::StrCat("output '", output.name().substr(0, 64), "'");
    const bool known = std::any_of(schema.outputs.begin(), schema.outputs.end(),
                                   [&](const OutputSchema& o) { return o.name == output.name(); });
    if (!known) {
      std::vector<std::string> names;
      for (const OutputSchema& o : schema.outputs) names.push_back(o.name);
      return absl::InvalidArgumentError(absl::StrCat(what, " is not an output of model '",
                                                     schema.name, "'; its outputs are ",
                                                     absl::StrJoin(names, ", ")));
    }
    KS_ASSIGN_OR_RETURN(std::optional<RegionRef> region, RegionOf(output.parameters(), what));
    if (region.has_value()) call.output_regions[output.name()] = *std::move(region);
    call.outputs.push_back(output.name());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferCall> FromInferRequest(ModelInferRequest* request, const KernelSchema& schema,
                                           const wire::RawBuffers* raw_buffers) {
  InferCall call;
  call.request.set_kernel(schema.name);
  call.request.set_request_id(request->id());
  KS_RETURN_IF_ERROR(TakeParameters(*request, call));
  KS_RETURN_IF_ERROR(TakeInputs(schema, *request, raw_buffers, call));
  KS_RETURN_IF_ERROR(TakeOutputs(schema, *request, call));
  return call;
}

}  // namespace kernelserve::kserve
