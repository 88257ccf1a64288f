#include "core/schema.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/elide.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

template <typename T>
std::string NameList(const std::vector<T>& items) {
  std::vector<std::string> names;
  for (const T& item : items) names.push_back(item.name);
  return names.empty() ? std::string("none") : absl::StrJoin(names, ", ");
}

std::string DTypeList(const std::vector<DType>& dtypes) {
  std::vector<std::string> names;
  for (DType d : dtypes) names.emplace_back(DTypeName(d));
  return absl::StrJoin(names, "|");
}

std::string_view ValueTypeName(const AttrValue& value) {
  switch (value.index()) {
    case 0:
      return "a bool";
    case 1:
      return "an int";
    case 2:
      return "a float";
    default:
      return "a string";
  }
}

std::string Bounds(const ParamSchema& param) {
  if (param.min && param.max) return absl::StrCat(*param.min, "..", *param.max);
  if (param.min) return absl::StrCat(">= ", *param.min);
  return absl::StrCat("<= ", *param.max);
}

// `value` as the param's type (an int taken for a float); InvalidArgument otherwise.
absl::StatusOr<AttrValue> Typed(const ParamSchema& param, const AttrValue& value) {
  const auto wrong = [&] {
    return absl::InvalidArgumentError(absl::StrCat("param '", param.name, "': expected ",
                                                   Sv(ParamTypeName(param.type)), ", got ",
                                                   Sv(ValueTypeName(value))));
  };
  switch (param.type) {
    case ParamType::kBool:
      if (!std::holds_alternative<bool>(value)) return wrong();
      return value;
    case ParamType::kInt:
      if (!std::holds_alternative<int64_t>(value)) return wrong();
      return value;
    case ParamType::kFloat:
      if (const int64_t* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
      if (!std::holds_alternative<double>(value)) return wrong();
      return value;
    case ParamType::kString:
      if (!std::holds_alternative<std::string>(value)) return wrong();
      return value;
  }
  return wrong();
}

absl::Status CheckBounds(const ParamSchema& param, const AttrValue& value) {
  double number = 0.0;
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    number = static_cast<double>(*i);
  } else if (const double* d = std::get_if<double>(&value)) {
    if (!std::isfinite(*d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("param '", param.name, "' = ", *d, ": expected a finite value"));
    }
    number = *d;
  } else {
    return absl::OkStatus();
  }
  if ((param.min && number < *param.min) || (param.max && number > *param.max)) {
    return absl::InvalidArgumentError(absl::StrCat("param '", param.name, "' = ", number,
                                                   " is out of range: expected ", Bounds(param),
                                                   " (", param.doc, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view ParamTypeName(ParamType type) {
  switch (type) {
    case ParamType::kBool:
      return "bool";
    case ParamType::kInt:
      return "int";
    case ParamType::kFloat:
      return "float";
    case ParamType::kString:
      return "string";
  }
  return "unknown";
}

const InputSchema* KernelSchema::FindInput(std::string_view name) const {
  for (const InputSchema& input : inputs) {
    if (input.name == name) return &input;
  }
  return nullptr;
}

const ParamSchema* KernelSchema::FindParam(std::string_view name) const {
  for (const ParamSchema& param : params) {
    if (param.name == name) return &param;
  }
  return nullptr;
}

absl::Status KernelSchema::CheckInputs(const TensorSpecMap& given) const {
  for (const auto& [name, spec] : given) {
    const InputSchema* input = FindInput(name);
    if (input == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown input '", Elide(name), "' of ",
                                                     this->name, ": expected ", NameList(inputs)));
    }
    if (std::find(input->dtypes.begin(), input->dtypes.end(), spec.dtype) == input->dtypes.end()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': dtype ",
                                                     Sv(DTypeName(spec.dtype)), ": expected ",
                                                     DTypeList(input->dtypes)));
    }
    const int rank = static_cast<int>(spec.shape.size());
    if (std::find(input->ranks.begin(), input->ranks.end(), rank) == input->ranks.end()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name,
                                                     "': ", ShapeString(spec.shape), " has rank ",
                                                     rank, ": expected ", input->shape));
    }
  }
  for (const InputSchema& input : inputs) {
    if (input.required && !given.contains(input.name)) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", input.name, "': expected ",
                                                     DTypeList(input.dtypes), " ", input.shape));
    }
  }
  return absl::OkStatus();
}

absl::Status KernelSchema::CheckInputData(const TensorMap& given) const {
  for (const auto& [name, tensor] : given) {
    if (tensor.has_data()) continue;
    const InputSchema* input = FindInput(name);
    if (input != nullptr && input->shape_only) continue;
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(ItemSize(tensor.dtype()));
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", Elide(name), "': ", tensor.spec().DebugString(), " has no data: ", this->name,
        " reads its values (", bytes, " bytes); only shape-only inputs may omit them"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Attributes> KernelSchema::CanonicalParams(const Attributes& given) const {
  Attributes canonical;
  for (const auto& [name, value] : given) {
    const ParamSchema* param = FindParam(name);
    if (param == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown param '", Elide(name), "' of ",
                                                     this->name, ": expected ", NameList(params)));
    }
    absl::StatusOr<AttrValue> typed = Typed(*param, value);
    if (!typed.ok()) return typed.status();
    if (absl::Status bounds = CheckBounds(*param, *typed); !bounds.ok()) return bounds;
    if (*typed != param->default_value) canonical.emplace(name, *std::move(typed));
  }
  return canonical;
}

template <typename T>
T ParamOr(const KernelSchema& schema, const Attributes& attrs, std::string_view name) {
  auto it = attrs.find(std::string(name));
  if (it != attrs.end()) return std::get<T>(it->second);
  return std::get<T>(schema.FindParam(name)->default_value);
}

template bool ParamOr<bool>(const KernelSchema&, const Attributes&, std::string_view);
template int64_t ParamOr<int64_t>(const KernelSchema&, const Attributes&, std::string_view);
template double ParamOr<double>(const KernelSchema&, const Attributes&, std::string_view);
template std::string ParamOr<std::string>(const KernelSchema&, const Attributes&, std::string_view);

}  // namespace kernelserve
