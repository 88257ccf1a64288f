#include "client/cli/call_spec.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/format.h"
#include "client/cli/npy.h"
#include "client/cli/tensor_args.h"
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
  if (input.dtype.has_value() && IsFp8(*input.dtype)) options.u1_as_fp8 = input.dtype;
  KS_ASSIGN_OR_RETURN(Tensor tensor, npy::Read(input.path, options));
  if (input.dtype.has_value() && tensor.dtype() != *input.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input ", input.name, ": '", input.path, "' holds ", tensor.spec().DebugString(),
        ", expected dtype ", Sv(DTypeName(*input.dtype))));
  }
  return tensor;
}

absl::Status BadValue(const std::string& key, const std::string& text, std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("--param ", key, "='", text, "': expected ", Sv(expected)));
}

// `text` as a value of the param type named `type` ("bool", "int", "float", "string").
absl::StatusOr<AttrValue> ParseTyped(const std::string& key, const std::string& text,
                                     const std::string& type) {
  if (type == "bool") {
    bool b = false;
    if (!absl::SimpleAtob(text, &b)) return BadValue(key, text, "true or false");
    return AttrValue(b);
  }
  if (type == "int") {
    int64_t i = 0;
    if (!absl::SimpleAtoi(text, &i)) return BadValue(key, text, "an integer");
    return AttrValue(i);
  }
  if (type == "float") {
    double d = 0;
    if (!absl::SimpleAtod(text, &d)) return BadValue(key, text, "a number");
    return AttrValue(d);
  }
  return AttrValue(text);
}

// The value `text` reads as without a schema.
AttrValue ParseUntyped(const std::string& text) {
  if (text == "true" || text == "false") return AttrValue(text == "true");
  int64_t i = 0;
  if (absl::SimpleAtoi(text, &i)) return AttrValue(i);
  double d = 0;
  if (absl::SimpleAtod(text, &d)) return AttrValue(d);
  return AttrValue(text);
}

// "4 GiB (4294967296 bytes)".
std::string Bytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  return absl::StrCat(FormatBytes(static_cast<uint64_t>(bytes)), " (", bytes, " bytes)");
}

// --tensor and --output-to into `spec`, after its other inputs: InvalidArgument for an input
// or output named twice.
absl::Status ReadResident(const Args& args, CallSpec* spec) {
  for (const std::string& text : args.GetAll("tensor")) {
    KS_ASSIGN_OR_RETURN(auto named, ParseResidentArg("tensor", text));
    if (spec->shapes.count(named.first) || spec->values.count(named.first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", named.first, "' is given twice (--tensor, and --shape, --values or --input)"));
    }
    if (!spec->resident_inputs.insert(named).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensor: input '", named.first, "' is given twice"));
    }
  }
  for (const std::string& text : args.GetAll("output-to")) {
    KS_ASSIGN_OR_RETURN(auto named, ParseResidentArg("output-to", text));
    if (!spec->resident_outputs.insert(named).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output-to: output '", named.first, "' is given twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CheckDataSize(const CallSpec& spec, int64_t limit_bytes) {
  const std::string limit = absl::StrCat("a request may carry at most ", Bytes(limit_bytes),
                                         ", the client's largest message");
  int64_t total = 0;
  auto add = [&](const std::string& name, const TensorSpec& shape) -> absl::Status {
    int64_t bytes = 0;
    absl::StatusOr<int64_t> count = NumElements(shape.shape);
    if (!count.ok() ||
        __builtin_mul_overflow(*count, static_cast<int64_t>(ItemSize(shape.dtype)), &bytes) ||
        __builtin_add_overflow(total, bytes, &total)) {
      return absl::InvalidArgumentError(absl::StrCat("input ", name, ": ", shape.DebugString(),
                                                     " has more bytes than 2^63; ", limit));
    }
    if (bytes > limit_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("input ", name, ": ", shape.DebugString(),
                                                     " is ", Bytes(bytes), "; ", limit));
    }
    return absl::OkStatus();
  };
  for (const auto& [name, shape] : spec.shapes) KS_RETURN_IF_ERROR(add(name, shape));
  for (const auto& [name, tensor] : spec.values) KS_RETURN_IF_ERROR(add(name, tensor.spec()));
  if (total > limit_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the inputs are ", Bytes(total), " together; ", limit));
  }
  return total;
}

absl::StatusOr<CallSpec> CallSpecFromArgs(const Args& args) {
  CallSpec spec;
  if (args.positional.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", args.positional.empty() ? "" : args.positional[0],
                     "' needs exactly one kernel name (see 'kernelserve kernels'), got ",
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
  KS_RETURN_IF_ERROR(ReadResident(args, &spec));
  return spec;
}

void PutResident(const CallSpec& spec, v1::ExecuteRequest* request) {
  for (const auto& [input, tensor] : spec.resident_inputs) {
    (*request->mutable_inputs())[input].mutable_ref()->set_tensor(tensor);
  }
  for (const auto& [output, tensor] : spec.resident_outputs) {
    (*request->mutable_output_regions())[output].set_tensor(tensor);
  }
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

absl::StatusOr<Attributes> ParamsFromText(const std::map<std::string, std::string>& params,
                                          const v1::KernelInfo* info) {
  Attributes out;
  for (const auto& [key, text] : params) {
    if (info == nullptr) {
      out[key] = ParseUntyped(text);
      continue;
    }
    const v1::ParamInfo* param = nullptr;
    std::vector<std::string> known;
    for (const v1::ParamInfo& p : info->param_schema()) {
      known.push_back(p.name());
      if (p.name() == key) param = &p;
    }
    if (param == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--param ", key, ": not a param of ", info->name(), ": expected ",
                       known.empty() ? std::string("none") : absl::StrJoin(known, ", ")));
    }
    KS_ASSIGN_OR_RETURN(out[key], ParseTyped(key, text, param->type()));
  }
  return out;
}

namespace {

// The kernel's listing (ListKernels), or nullopt when the server does not list it.
std::optional<v1::KernelInfo> KernelInfoOf(const Client& client, const std::string& kernel) {
  absl::StatusOr<v1::ListKernelsResponse> kernels = client.ListKernels();
  if (!kernels.ok()) return std::nullopt;
  const std::string base = kernel.substr(0, kernel.find('@'));
  for (const v1::KernelInfo& k : kernels->kernels()) {
    if (k.name() == base) return k;
  }
  return std::nullopt;
}

// True when `info` (nullable) marks input `name` shape-only.
bool IsShapeOnly(const v1::KernelInfo* info, const std::string& name) {
  if (info == nullptr) return false;
  for (const v1::InputInfo& input : info->input_schema()) {
    if (input.name() == name) return input.shape_only();
  }
  return false;
}

}  // namespace

template <typename Request>
absl::Status FillRequest(const CallSpec& spec, const Client& client, bool with_data,
                         Request* request) {
  request->set_kernel(spec.kernel);
  // The kernel's schema as the server lists it: it types params and names shape-only inputs.
  // The server checks the call either way.
  std::optional<v1::KernelInfo> info;
  if (!spec.params.empty() || (with_data && !spec.shapes.empty()))
    info = KernelInfoOf(client, spec.kernel);
  if (!spec.params.empty()) {
    KS_ASSIGN_OR_RETURN(const Attributes params,
                        ParamsFromText(spec.params, info ? &*info : nullptr));
    for (const auto& [name, value] : params) {
      (*request->mutable_parameters())[name] = ToProto(value);
    }
  }
  auto& inputs = *request->mutable_inputs();
  const auto put_shape = [&inputs](const std::string& name, const TensorSpec& shape) {
    inputs[name].set_dtype(ToProto(shape.dtype));
    inputs[name].mutable_shape()->Assign(shape.shape.begin(), shape.shape.end());
  };
  if (with_data) {
    // Inputs of --shape that the kernel reads by shape only go without data.
    CallSpec sent = spec;
    for (const auto& [name, shape] : spec.shapes) {
      if (!IsShapeOnly(info ? &*info : nullptr, name)) continue;
      put_shape(name, shape);
      sent.shapes.erase(name);
    }
    // Protobuf cannot serialize a message of 2 GiB or more: check before making the data.
    const int64_t limit =
        std::min<int64_t>(client.options().max_message_bytes, std::numeric_limits<int32_t>::max());
    KS_RETURN_IF_ERROR(CheckDataSize(sent, limit).status());
    for (auto& [name, tensor] : MakeInputs(sent)) PutTensor(std::move(tensor), &inputs[name]);
  } else {
    for (const auto& [name, shape] : spec.shapes) put_shape(name, shape);
    for (const auto& [name, tensor] : spec.values) PutTensor(tensor, &inputs[name]);
  }
  request->set_platform(spec.platform);
  if (spec.device.has_value()) request->set_device(*spec.device);
  return absl::OkStatus();
}

template absl::Status FillRequest(const CallSpec&, const Client&, bool, v1::ExecuteRequest*);
template absl::Status FillRequest(const CallSpec&, const Client&, bool, v1::AutotuneRequest*);
template absl::Status FillRequest(const CallSpec&, const Client&, bool, v1::PutConfigRequest*);

}  // namespace kernelserve::cli
