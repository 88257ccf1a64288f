// The params of kernel calls on the wire: typed params messages and `parameters` maps to
// attributes, and kernel schemas to ListKernels' KernelInfo. Driven by reflection and the
// schema, so no kernel is named here.
#include <string>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "core/utils/elide.h"
#include "core/utils/string_view.h"
#include "google/protobuf/generated_message_reflection.h"
#include "proto/convert.h"

namespace kernelserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The value of scalar `field` of `message`, as a param.
absl::StatusOr<AttrValue> FieldValue(const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return AttrValue(r.GetBool(message, &field));
    case FieldDescriptor::CPPTYPE_INT32:
      return AttrValue(int64_t{r.GetInt32(message, &field)});
    case FieldDescriptor::CPPTYPE_INT64:
      return AttrValue(r.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return AttrValue(int64_t{r.GetUInt32(message, &field)});
    case FieldDescriptor::CPPTYPE_FLOAT:
      return AttrValue(double{r.GetFloat(message, &field)});
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return AttrValue(r.GetDouble(message, &field));
    case FieldDescriptor::CPPTYPE_STRING:
      return AttrValue(r.GetString(message, &field));
    case FieldDescriptor::CPPTYPE_ENUM:
      return AttrValue(int64_t{r.GetEnumValue(message, &field)});
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("params field '", field.name(), "' is not a scalar: params are scalars"));
  }
}

// True when `field` of `message` was given: set, for fields with presence; non-zero for the
// others (proto3 cannot tell zero from unset there, and zero is every such param's default).
bool Given(const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  if (field.has_presence()) return r.HasField(message, &field);
  absl::StatusOr<AttrValue> value = FieldValue(message, field);
  if (!value.ok()) return true;  // reported by FieldValue
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return !v.empty();
        } else {
          return v != T{};
        }
      },
      *value);
}

// The request fields ParamsFromProto reads. A value type.
struct RequestFields {
  const google::protobuf::OneofDescriptor* params = nullptr;  // the typed params member
  const FieldDescriptor* kernel = nullptr;
  const FieldDescriptor* parameters = nullptr;  // the map
};

RequestFields LookUpFields(const google::protobuf::Descriptor& type) {
  return {type.FindOneofByName("params"), type.FindFieldByName("kernel"),
          type.FindFieldByName("parameters")};
}

// The fields of `type`, looked up by name once per generated request type (descriptors of the
// generated pool live as long as the program; a lookup by name is a hash of the name on every
// call otherwise).
RequestFields FieldsOf(const google::protobuf::Descriptor* type) {
  if (type->file()->pool() != google::protobuf::DescriptorPool::generated_pool()) {
    return LookUpFields(*type);
  }
  static absl::Mutex mu(absl::kConstInit);
  static auto* const known =
      new absl::flat_hash_map<const google::protobuf::Descriptor*, RequestFields>();
  {
    absl::ReaderMutexLock lock(&mu);
    auto it = known->find(type);
    if (it != known->end()) return it->second;
  }
  const RequestFields fields = LookUpFields(*type);
  absl::MutexLock lock(&mu);
  known->emplace(type, fields);
  return fields;
}

// The kernel name of a request without its "@vN".
std::string KernelBaseName(const Message& request, const FieldDescriptor* field) {
  if (field == nullptr) return "";
  const std::string name = request.GetReflection()->GetString(request, field);
  return name.substr(0, name.find('@'));
}

// The set fields of the request's typed `params` member, into `params`.
absl::Status TypedParams(const Message& request, const RequestFields& fields, Attributes& params) {
  if (fields.params == nullptr) return absl::OkStatus();
  const Reflection& r = *request.GetReflection();
  const FieldDescriptor* member = r.GetOneofFieldDescriptor(request, fields.params);
  if (member == nullptr) return absl::OkStatus();
  const std::string kernel = KernelBaseName(request, fields.kernel);
  if (member->name() != kernel) {
    return absl::InvalidArgumentError(absl::StrCat("params: ", member->name(),
                                                   " params given for kernel '", Elide(kernel),
                                                   "': expected its own params or parameters"));
  }
  const Message& typed = r.GetMessage(request, member);
  const google::protobuf::Descriptor& type = *typed.GetDescriptor();
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    if (!Given(typed, field)) continue;
    KS_ASSIGN_OR_RETURN(params[field.name()], FieldValue(typed, field));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttrValue> FromProto(const v1::ParamValue& proto, const std::string& name) {
  switch (proto.value_case()) {
    case v1::ParamValue::kBoolValue:
      return AttrValue(proto.bool_value());
    case v1::ParamValue::kInt64Value:
      return AttrValue(proto.int64_value());
    case v1::ParamValue::kDoubleValue:
      return AttrValue(proto.double_value());
    case v1::ParamValue::kStringValue:
      return AttrValue(proto.string_value());
    case v1::ParamValue::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("param '", Elide(name), "': no value (expected bool, int64, double or string)"));
}

v1::ParamValue ToProto(const AttrValue& value) {
  v1::ParamValue proto;
  if (const bool* b = std::get_if<bool>(&value)) proto.set_bool_value(*b);
  if (const int64_t* i = std::get_if<int64_t>(&value)) proto.set_int64_value(*i);
  if (const double* d = std::get_if<double>(&value)) proto.set_double_value(*d);
  if (const std::string* s = std::get_if<std::string>(&value)) proto.set_string_value(*s);
  return proto;
}

absl::StatusOr<Attributes> ParamsFromProto(const Message& request) {
  Attributes params;
  const RequestFields fields = FieldsOf(request.GetDescriptor());
  KS_RETURN_IF_ERROR(TypedParams(request, fields, params));
  const FieldDescriptor* map = fields.parameters;
  if (map == nullptr) return params;
  const Reflection& r = *request.GetReflection();
  const int entries = r.FieldSize(request, map);
  for (int i = 0; i < entries; ++i) {
    // A map entry is a message {key = 1, value = 2} of each request's own entry type.
    const Message& entry = r.GetRepeatedMessage(request, map, i);
    const Reflection& er = *entry.GetReflection();
    const std::string key = er.GetString(entry, entry.GetDescriptor()->FindFieldByNumber(1));
    const auto* value = google::protobuf::DynamicCastToGenerated<v1::ParamValue>(
        &er.GetMessage(entry, entry.GetDescriptor()->FindFieldByNumber(2)));
    if (value == nullptr) return absl::InternalError("parameters: unexpected entry type");
    if (params.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("param '", Elide(key), "' given both in params and parameters"));
    }
    KS_ASSIGN_OR_RETURN(params[key], FromProto(*value, key));
  }
  return params;
}

absl::StatusOr<Attributes> ParamsFromProto(
    const google::protobuf::Map<std::string, v1::ParamValue>& parameters) {
  Attributes params;
  for (const auto& [key, value] : parameters) {
    KS_ASSIGN_OR_RETURN(params[key], FromProto(value, key));
  }
  return params;
}

void ToProto(const KernelSchema& schema, v1::KernelInfo* info) {
  info->set_name(schema.name);
  info->set_version(schema.version);
  info->set_doc(schema.doc);
  info->set_vjp(schema.vjp);
  info->set_vjp_of(schema.vjp_of);
  for (const InputSchema& input : schema.inputs) {
    v1::InputInfo* out = info->add_input_schema();
    out->set_name(input.name);
    out->set_required(input.required);
    std::vector<std::string> dtypes;
    for (DType d : input.dtypes) {
      out->add_dtypes(ToProto(d));
      dtypes.emplace_back(DTypeName(d));
    }
    for (int rank : input.ranks) out->add_ranks(rank);
    out->set_shape(input.shape);
    out->set_doc(input.doc);
    out->set_shape_only(input.shape_only);
    out->set_updated(input.updated);
    v1::ArgInfo* arg = info->add_inputs();
    arg->set_name(input.name);
    arg->set_required(input.required);
    arg->set_doc(absl::StrCat(absl::StrJoin(dtypes, "|"), " ", input.shape,
                              input.shape_only ? " (shape only: data may be empty)" : "",
                              input.updated ? " (updated in place)" : "", "; ", input.doc));
  }
  for (const OutputSchema& output : schema.outputs) {
    v1::OutputInfo* out = info->add_output_schema();
    out->set_name(output.name);
    out->set_dtype(output.dtype);
    out->set_shape(output.shape);
    out->set_doc(output.doc);
    out->set_in_place_of(output.in_place_of);
    v1::ArgInfo* arg = info->add_outputs();
    arg->set_name(output.name);
    arg->set_doc(absl::StrCat(output.dtype, " ", output.shape, "; ", output.doc));
  }
  for (const ParamSchema& param : schema.params) {
    v1::ParamInfo* out = info->add_param_schema();
    out->set_name(param.name);
    out->set_type(std::string(ParamTypeName(param.type)));
    *out->mutable_default_value() = ToProto(param.default_value);
    if (param.min) out->set_min(*param.min);
    if (param.max) out->set_max(*param.max);
    out->set_doc(param.doc);
    v1::ArgInfo* arg = info->add_params();
    arg->set_name(param.name);
    arg->set_doc(absl::StrCat(Sv(ParamTypeName(param.type)), ", default ",
                              AttrValueString(param.default_value), ": ", param.doc));
  }
  const google::protobuf::OneofDescriptor* oneof =
      v1::ExecuteRequest::descriptor()->FindOneofByName("params");
  for (int i = 0; oneof != nullptr && i < oneof->field_count(); ++i) {
    if (oneof->field(i)->name() == schema.name) info->set_params_field(schema.name);
  }
}

}  // namespace kernelserve
