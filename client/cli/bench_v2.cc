#include "client/cli/bench_v2.h"

#include <google/protobuf/arena.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

// The KServe v2 datatype of `dtype`; "" for one it lacks.
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
    case v1::DTYPE_F8_E4M3:  // the protocol has no fp8
    case v1::DTYPE_F8_E5M2:
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
  if (const size_t at = request.kernel().find('@'); at != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", request.kernel(), "': a kernel id (NAME@VERSION) is not taken with ",
        "--protocol=v2 (its models are the bare names); give '", request.kernel().substr(0, at),
        "' or use --protocol=native"));
  }
  inference::ModelInferRequest out;
  out.set_model_name(request.kernel());
  out.set_id(request.request_id());
  for (const auto& [name, tensor] : request.inputs()) {
    const char* datatype = Datatype(tensor.dtype());
    if (*datatype == '\0') {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': dtype ",
                                                     v1::DType_Name(tensor.dtype()),
                                                     " has no KServe v2 datatype; use "
                                                     "--protocol=native (the kernelserve.v1 API)"));
    }
    auto* input = out.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
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
  t.launch_us = Param(response, "launch_us");
  t.kernel_us = Param(response, "kernel_us");
  t.d2h_us = Param(response, "d2h_us");
  t.total_us = Param(response, "total_us");
  t.recv_us = Param(response, "recv_us");
  return t;
}

absl::StatusOr<BenchReport> RunBenchV2(const Client& client, const v1::ExecuteRequest& request,
                                       const BenchOptions& options) {
  KS_ASSIGN_OR_RETURN(inference::ModelInferRequest made, ToModelInfer(request));
  // Shared and immutable: each call sends its raw contents without a copy, as the native bench
  // sends its tensors.
  auto infer = std::make_shared<const inference::ModelInferRequest>(std::move(made));
  return RunBench(
      [&client, &infer]() -> absl::StatusOr<ServerTimings> {
        // Parsed on an arena, as a C++ load generator would: the answer's parameter map is
        // fourteen entries, and freeing them one by one costs as much as parsing them.
        google::protobuf::Arena arena;
        auto* response =
            google::protobuf::Arena::CreateMessage<inference::ModelInferResponse>(&arena);
        KS_RETURN_IF_ERROR(client.ModelInfer(infer, response));
        return TimingsOf(*response);
      },
      options);
}

}  // namespace kernelserve::cli
