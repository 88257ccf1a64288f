#include "client/cli/bench_v2.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kernelserve::cli {
namespace {

const char* Datatype(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_F32:
      return "FP32";
    case v1::DTYPE_F16:
      return "FP16";
    case v1::DTYPE_BF16:
      return "BF16";
    case v1::DTYPE_I32:
      return "INT32";
    case v1::DTYPE_I64:
      return "INT64";
    case v1::DTYPE_BOOL:
      return "BOOL";
    default:
      return "";
  }
}

absl::Status NotWithV2(const char* flag) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag,
                   " is not taken with --protocol=v2 (the KServe v2 front door runs the server's "
                   "own choice); drop it or use --protocol=native"));
}

int64_t Param(const inference::ModelInferResponse& response, const char* name) {
  auto it = response.parameters().find(name);
  return it == response.parameters().end() ? 0 : it->second.int64_param();
}

}  // namespace

absl::StatusOr<inference::ModelInferRequest> ToModelInfer(const v1::ExecuteRequest& request) {
  if (request.has_config()) return NotWithV2("--config");
  if (request.has_policy()) return NotWithV2("--autotune");
  if (!request.platform().empty() && request.platform() != "auto") return NotWithV2("--platform");
  if (request.has_device()) return NotWithV2("--device");
  inference::ModelInferRequest out;
  out.set_model_name(request.kernel());
  out.set_id(request.request_id());
  for (const auto& [name, tensor] : request.inputs()) {
    auto* input = out.add_inputs();
    input->set_name(name);
    input->set_datatype(Datatype(tensor.dtype()));
    input->mutable_shape()->CopyFrom(tensor.shape());
    out.add_raw_input_contents(tensor.data());
  }
  for (const auto& [name, value] : request.parameters()) {
    inference::InferParameter& param = (*out.mutable_parameters())[name];
    switch (value.value_case()) {
      case v1::ParamValue::kBoolValue:
        param.set_bool_param(value.bool_value());
        break;
      case v1::ParamValue::kInt64Value:
        param.set_int64_param(value.int64_value());
        break;
      case v1::ParamValue::kDoubleValue:
        param.set_double_param(value.double_value());
        break;
      case v1::ParamValue::kStringValue:
        param.set_string_param(value.string_value());
        break;
      case v1::ParamValue::VALUE_NOT_SET:
        break;
    }
  }
  return out;
}

ServerTimings TimingsOf(const inference::ModelInferResponse& response) {
  ServerTimings t;
  t.queue_us = Param(response, "queue_us");
  t.select_us = Param(response, "select_us");
  t.h2d_us = Param(response, "h2d_us");
  t.kernel_us = Param(response, "kernel_us");
  t.d2h_us = Param(response, "d2h_us");
  t.total_us = Param(response, "total_us");
  t.recv_us = Param(response, "recv_us");
  return t;
}

}  // namespace kernelserve::cli
