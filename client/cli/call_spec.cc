#include "client/cli/call_spec.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/npy.h"
#include "core/status_macros.h"
#include "core/utils/random_tensor.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

absl::Status Duplicate(const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("input '", name, "' is given twice (--shape, --values, --input)"));
}

absl::StatusOr<Tensor> ReadInput(const InputArg& input) {
  npy::ReadOptions options;
  options.u2_as_bf16 = input.dtype == DType::kBF16;
  KS_ASSIGN_OR_RETURN(Tensor tensor, npy::Read(input.path, options));
  if (input.dtype.has_value() && tensor.dtype() != *input.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input ", input.name, ": '", input.path, "' holds ", tensor.spec().DebugString(),
        ", expected dtype ", Sv(DTypeName(*input.dtype))));
  }
  return tensor;
}

template <typename T>
absl::Status ParseParam(const std::string& key, const std::string& text, T* value) {
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) {
    ok = absl::SimpleAtob(text, value);
  } else if constexpr (std::is_same_v<T, float>) {
    ok = absl::SimpleAtof(text, value);
  } else {
    ok = absl::SimpleAtoi(text, value);
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--param ", key, "='", text, "': expected ",
                                                 std::is_same_v<T, bool>    ? "true or false"
                                                 : std::is_same_v<T, float> ? "a number"
                                                                            : "an integer"));
}

absl::Status UnknownParam(const std::string& key, const char* kernel, const char* known) {
  return absl::InvalidArgumentError(
      absl::StrCat("--param ", key, ": not a param of ", kernel, ": expected ", known));
}

}  // namespace

absl::StatusOr<CallSpec> CallSpecFromArgs(const Args& args) {
  CallSpec spec;
  if (args.positional.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", args.positional.empty() ? "" : args.positional[0],
                     "' needs exactly one kernel name (mean_pooling, flash_attention), got ",
                     args.positional.size() < 2 ? 0 : args.positional.size() - 1));
  }
  spec.kernel = args.positional[1];
  for (const std::string& text : args.GetAll("shape")) {
    KS_ASSIGN_OR_RETURN(auto shape, ParseShapeArg(text));
    if (!spec.shapes.emplace(shape).second) return Duplicate(shape.first);
  }
  for (const std::string& text : args.GetAll("values")) {
    KS_ASSIGN_OR_RETURN(auto values, ParseValuesArg(text));
    const std::string name = values.first;
    if (spec.shapes.count(name) || !spec.values.emplace(std::move(values)).second) {
      return Duplicate(name);
    }
  }
  for (const std::string& text : args.GetAll("input")) {
    KS_ASSIGN_OR_RETURN(InputArg input, ParseInputArg(text));
    KS_ASSIGN_OR_RETURN(Tensor tensor, ReadInput(input));
    if (spec.shapes.count(input.name) ||
        !spec.values.emplace(input.name, std::move(tensor)).second) {
      return Duplicate(input.name);
    }
  }
  for (const std::string& text : args.GetAll("param")) {
    KS_ASSIGN_OR_RETURN(auto param, ParseParamArg(text));
    spec.params[param.first] = param.second;
  }
  spec.platform = args.Get("platform");
  if (args.Has("device")) {
    KS_ASSIGN_OR_RETURN(int64_t device, args.GetInt("device", -1));
    spec.device = static_cast<int>(device);
  }
  if (args.Has("config")) {
    KS_ASSIGN_OR_RETURN(spec.config, ParseConfigArg(args.Get("config")));
  }
  KS_ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 0));
  spec.seed = static_cast<uint64_t>(seed);
  return spec;
}

TensorMap MakeInputs(const CallSpec& spec) {
  TensorMap inputs;
  uint64_t seed = spec.seed;
  for (const auto& [name, shape] : spec.shapes) {
    inputs[name] = RandomTensor(shape.dtype, shape.shape, seed++);
  }
  for (const auto& [name, tensor] : spec.values) inputs[name] = tensor;
  return inputs;
}

absl::Status SetMeanPoolingParams(const std::map<std::string, std::string>& params,
                                  v1::MeanPoolingParams* out) {
  for (const auto& [key, text] : params) {
    if (key != "chunk_size") return UnknownParam(key, "mean_pooling", "chunk_size");
    int32_t chunk_size = 0;
    KS_RETURN_IF_ERROR(ParseParam(key, text, &chunk_size));
    out->set_chunk_size(chunk_size);
  }
  return absl::OkStatus();
}

absl::Status SetFlashAttentionParams(const std::map<std::string, std::string>& params,
                                     v1::FlashAttentionParams* out) {
  for (const auto& [key, text] : params) {
    bool flag = false;
    float number = 0;
    int32_t integer = 0;
    if (key == "causal" || key == "return_lse") {
      KS_RETURN_IF_ERROR(ParseParam(key, text, &flag));
      key == "causal" ? out->set_causal(flag) : out->set_return_lse(flag);
    } else if (key == "softmax_scale" || key == "logits_soft_cap") {
      KS_RETURN_IF_ERROR(ParseParam(key, text, &number));
      key == "softmax_scale" ? out->set_softmax_scale(number) : out->set_logits_soft_cap(number);
    } else if (key == "window_left" || key == "window_right") {
      KS_RETURN_IF_ERROR(ParseParam(key, text, &integer));
      key == "window_left" ? out->set_window_left(integer) : out->set_window_right(integer);
    } else {
      return UnknownParam(key, "flash_attention",
                          "causal, softmax_scale, window_left, window_right, logits_soft_cap "
                          "or return_lse");
    }
  }
  return absl::OkStatus();
}

template <typename Request>
absl::Status FillRequest(const CallSpec& spec, bool with_data, Request* request) {
  request->set_kernel(spec.kernel);
  if (spec.kernel == "mean_pooling") {
    KS_RETURN_IF_ERROR(SetMeanPoolingParams(spec.params, request->mutable_mean_pooling()));
  } else if (spec.kernel == "flash_attention") {
    KS_RETURN_IF_ERROR(SetFlashAttentionParams(spec.params, request->mutable_flash_attention()));
  } else if (!spec.params.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--param: params are known for mean_pooling and flash_attention, not '", spec.kernel, "'"));
  }
  auto& inputs = *request->mutable_inputs();
  if (with_data) {
    for (auto& [name, tensor] : MakeInputs(spec)) PutTensor(std::move(tensor), &inputs[name]);
  } else {
    for (const auto& [name, shape] : spec.shapes) {
      inputs[name].set_dtype(ToProto(shape.dtype));
      inputs[name].mutable_shape()->Assign(shape.shape.begin(), shape.shape.end());
    }
    for (const auto& [name, tensor] : spec.values) PutTensor(tensor, &inputs[name]);
  }
  request->set_platform(spec.platform);
  if (spec.device.has_value()) request->set_device(*spec.device);
  return absl::OkStatus();
}

template absl::Status FillRequest(const CallSpec&, bool, v1::ExecuteRequest*);
template absl::Status FillRequest(const CallSpec&, bool, v1::AutotuneRequest*);
template absl::Status FillRequest(const CallSpec&, bool, v1::PutConfigRequest*);

}  // namespace kernelserve::cli
