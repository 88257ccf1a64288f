#include "proto/convert.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/elide.h"
#include "core/utils/string_view.h"

namespace kernelserve {
namespace {

// Checks dims and, unless `allow_empty` and the data is empty, the byte count of `proto`, whose
// data is `data_bytes` long (its own, or that of the buffer holding it).
absl::StatusOr<TensorSpec> CheckTensor(const v1::Tensor& proto, const std::string& what,
                                       bool allow_empty, size_t data_bytes) {
  TensorSpec spec;
  KS_ASSIGN_OR_RETURN(spec.dtype, FromProto(proto.dtype(), what));
  if (static_cast<size_t>(proto.shape_size()) > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape of ", proto.shape_size(),
                                                   " dims: expected at most ", kMaxRank));
  }
  spec.shape.assign(proto.shape().begin(), proto.shape().end());
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    if (spec.shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", i, " of shape ",
                                                     ShapeString(spec.shape),
                                                     " is negative: expected dims >= 0"));
    }
  }
  absl::StatusOr<int64_t> count = NumElements(spec.shape);
  int64_t bytes = 0;
  if (!count.ok() ||
      __builtin_mul_overflow(*count, static_cast<int64_t>(ItemSize(spec.dtype)), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(spec.shape),
                                                   " overflows int64 (product of dims times ",
                                                   ItemSize(spec.dtype), " bytes)"));
  }
  if (allow_empty && data_bytes == 0) return spec;
  if (static_cast<uint64_t>(data_bytes) != static_cast<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", spec.DebugString(),
                                                   " needs prod(shape) * itemsize = ", bytes,
                                                   " bytes of data, got ", data_bytes));
  }
  return spec;
}

}  // namespace

absl::StatusOr<DType> FromProto(v1::DType dtype, const std::string& what) {
  switch (dtype) {
    case v1::DTYPE_F32:
      return DType::kF32;
    case v1::DTYPE_F16:
      return DType::kF16;
    case v1::DTYPE_BF16:
      return DType::kBF16;
    case v1::DTYPE_I32:
      return DType::kI32;
    case v1::DTYPE_I64:
      return DType::kI64;
    case v1::DTYPE_BOOL:
      return DType::kBool;
    case v1::DTYPE_F8_E4M3:
      return DType::kF8E4M3;
    case v1::DTYPE_F8_E5M2:
      return DType::kF8E5M2;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dtype is unspecified: expected one of ", Sv(kDTypeNames)));
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown dtype ", static_cast<int>(dtype),
                                                 ": expected one of ", Sv(kDTypeNames)));
}

v1::DType ToProto(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v1::DTYPE_F32;
    case DType::kF16:
      return v1::DTYPE_F16;
    case DType::kBF16:
      return v1::DTYPE_BF16;
    case DType::kI32:
      return v1::DTYPE_I32;
    case DType::kI64:
      return v1::DTYPE_I64;
    case DType::kBool:
      return v1::DTYPE_BOOL;
    case DType::kF8E4M3:
      return v1::DTYPE_F8_E4M3;
    case DType::kF8E5M2:
      return v1::DTYPE_F8_E5M2;
  }
  return v1::DTYPE_UNSPECIFIED;
}

namespace {

absl::StatusOr<Tensor> TakeBufferedTensor(v1::Tensor* proto, const std::string& what,
                                          std::shared_ptr<HostBuffer> buffer) {
  KS_ASSIGN_OR_RETURN(TensorSpec spec,
                      CheckTensor(*proto, what, /*allow_empty=*/false, buffer->size()));
  absl::StatusOr<Tensor> tensor =
      Tensor::FromBuffer(spec.dtype, std::move(spec.shape), std::move(buffer));
  if (!tensor.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", tensor.status().message()));
  }
  return tensor;
}

}  // namespace

absl::StatusOr<Tensor> TakeTensor(v1::Tensor* proto, const std::string& what) {
  if (proto->has_ref()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": a ref (a shared-memory region or a resident tensor) is taken by Execute "
                     "and ExecuteStream only; send the bytes in data"));
  }
  KS_ASSIGN_OR_RETURN(TensorSpec spec,
                      CheckTensor(*proto, what, /*allow_empty=*/false, proto->data().size()));
  absl::StatusOr<Tensor> tensor =
      Tensor::FromBytes(spec.dtype, std::move(spec.shape), std::move(*proto->mutable_data()));
  proto->clear_data();
  if (!tensor.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", tensor.status().message()));
  }
  return tensor;
}

absl::StatusOr<TensorSpec> SpecFromProto(const v1::Tensor& proto, const std::string& what) {
  return CheckTensor(proto, what, /*allow_empty=*/true, proto.data().size());
}

void PutTensor(Tensor tensor, v1::Tensor* proto) {
  proto->set_dtype(ToProto(tensor.dtype()));
  proto->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  *proto->mutable_data() = std::move(tensor).ReleaseBytes();
}

void PutTensor(Tensor tensor, v1::Tensor* proto, wire::TensorBuffers* buffers) {
  if (tensor.buffer() == nullptr) return PutTensor(std::move(tensor), proto);
  proto->set_dtype(ToProto(tensor.dtype()));
  proto->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  proto->clear_data();
  (*buffers)[proto] = tensor.buffer();
}

namespace {

// True when `proto` comes without data (nor a ref) for an input `schema` marks shape_only.
bool IsShapeOnly(const KernelSchema* schema, const std::string& name, const v1::Tensor& proto) {
  if (schema == nullptr || proto.has_ref() || !proto.data().empty()) return false;
  const InputSchema* input = schema->FindInput(name);
  return input != nullptr && input->shape_only;
}

}  // namespace

absl::StatusOr<TensorMap> TakeTensors(google::protobuf::Map<std::string, v1::Tensor>* protos,
                                      const wire::TensorBuffers* buffers,
                                      const KernelSchema* schema) {
  TensorMap tensors;
  for (auto& [name, proto] : *protos) {
    const std::string what = absl::StrCat("input '", Elide(name), "'");
    auto found = buffers != nullptr ? buffers->find(&proto) : wire::TensorBuffers::const_iterator();
    if (buffers != nullptr && found != buffers->end()) {
      KS_ASSIGN_OR_RETURN(tensors[name], TakeBufferedTensor(&proto, what, found->second));
    } else if (IsShapeOnly(schema, name, proto)) {
      KS_ASSIGN_OR_RETURN(TensorSpec spec, SpecFromProto(proto, what));
      tensors[name] = Tensor::ShapeOnly(spec.dtype, std::move(spec.shape));
    } else {
      KS_ASSIGN_OR_RETURN(tensors[name], TakeTensor(&proto, what));
    }
  }
  return tensors;
}

absl::StatusOr<TensorSpecMap> SpecsFromProto(
    const google::protobuf::Map<std::string, v1::Tensor>& protos) {
  TensorSpecMap specs;
  for (const auto& [name, proto] : protos) {
    // The error's context is built only for an error (building it took a third of this loop's
    // time on a tiny call): the input is checked again then, named as the caller sees it.
    absl::StatusOr<TensorSpec> spec = SpecFromProto(proto, name);
    if (!spec.ok()) spec = SpecFromProto(proto, absl::StrCat("input '", Elide(name), "'"));
    KS_ASSIGN_OR_RETURN(specs[name], std::move(spec));
  }
  return specs;
}

KernelConfig FromProto(const v1::KernelConfig& proto) {
  KernelConfig config;
  config.block_q = proto.block_q();
  config.block_k = proto.block_k();
  config.block_d = proto.block_d();
  config.num_warps = proto.num_warps();
  config.num_stages = proto.num_stages();
  config.block_size = proto.block_size();
  config.platform = proto.platform();
  config.algorithm = proto.algorithm();
  config.priority = proto.priority();
  for (const auto& [name, value] : proto.fields()) config.named[name] = value;
  return config;
}

v1::KernelConfig ToProto(const KernelConfig& config) {
  v1::KernelConfig proto;
  proto.set_block_q(config.block_q);
  proto.set_block_k(config.block_k);
  proto.set_block_d(config.block_d);
  proto.set_num_warps(config.num_warps);
  proto.set_num_stages(config.num_stages);
  proto.set_block_size(config.block_size);
  proto.set_platform(config.platform);
  proto.set_algorithm(config.algorithm);
  proto.set_priority(config.priority);
  for (const auto& [name, value] : config.named) (*proto.mutable_fields())[name] = value;
  return proto;
}

absl::Status CheckConfigProto(const v1::KernelConfig& proto) {
  if (proto.backend().empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "config backend '", Elide(proto.backend()),
      "': backend is no longer a config field (config schema 2); a kernel variant is "
      "'algorithm', a platform's own fields are named in 'fields' (ListKernels lists them)"));
}

v1::ConfigFieldInfo ToProto(const ConfigFieldSchema& field) {
  v1::ConfigFieldInfo info;
  info.set_name(field.name);
  info.set_kind(std::string(ConfigFieldKindName(field.kind)));
  info.set_min(field.min);
  info.set_max(field.max);
  for (const std::string& choice : field.choices) info.add_choices(choice);
  info.set_default_value(field.default_value);
  info.set_doc(field.doc);
  info.set_named(!IsFixedConfigField(field.name));
  return info;
}

bool IsSet(const v1::KernelConfig& proto) { return FromProto(proto) != KernelConfig{}; }

v1::ConfigSource ToProto(ConfigSource source) {
  switch (source) {
    case ConfigSource::kOverride:
      return v1::CONFIG_SOURCE_OVERRIDE;
    case ConfigSource::kOverlay:
      return v1::CONFIG_SOURCE_OVERLAY;
    case ConfigSource::kMemory:
      return v1::CONFIG_SOURCE_MEMORY;
    case ConfigSource::kFile:
      return v1::CONFIG_SOURCE_FILE;
    case ConfigSource::kRedis:
      return v1::CONFIG_SOURCE_REDIS;
    case ConfigSource::kAutotune:
      return v1::CONFIG_SOURCE_AUTOTUNE;
    case ConfigSource::kHeuristic:
      return v1::CONFIG_SOURCE_HEURISTIC;
  }
  return v1::CONFIG_SOURCE_UNSPECIFIED;
}

PolicyPatch FromProto(const v1::TuningPolicy& policy) {
  PolicyPatch patch;
  if (policy.has_allow_autotune()) patch.allow_autotune = policy.allow_autotune();
  if (policy.has_allow_heuristics()) patch.allow_heuristics = policy.allow_heuristics();
  if (policy.has_persist()) patch.persist = policy.persist();
  return patch;
}

void ToProto(const Timings& timings, v1::Timing* proto) {
  proto->set_select_us(timings.select_us);
  proto->set_h2d_us(timings.h2d_us);
  proto->set_launch_us(timings.launch_us);
  proto->set_kernel_us(timings.kernel_us);
  proto->set_d2h_us(timings.d2h_us);
  proto->set_total_us(timings.total_us);
}

}  // namespace kernelserve
