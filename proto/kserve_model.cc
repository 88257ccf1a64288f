// The model side of the Open Inference Protocol mapping: datatypes, ModelMetadata and
// ModelConfig from kernel schemas.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/kserve_convert.h"

namespace kernelserve::kserve {
namespace {

struct DatatypeEntry {
  std::string_view name;
  DType dtype;
  inference::DataType config;
};
constexpr DatatypeEntry kDatatypes[] = {
    {"FP32", DType::kF32, inference::TYPE_FP32},   {"FP16", DType::kF16, inference::TYPE_FP16},
    {"BF16", DType::kBF16, inference::TYPE_BF16},  {"INT32", DType::kI32, inference::TYPE_INT32},
    {"INT64", DType::kI64, inference::TYPE_INT64}, {"BOOL", DType::kBool, inference::TYPE_BOOL},
};

// The entry of `dtype`; Unimplemented naming `what` for the fp8 dtypes, which the protocol
// lacks.
absl::StatusOr<const DatatypeEntry*> EntryOf(DType dtype, std::string_view what) {
  for (const DatatypeEntry& entry : kDatatypes) {
    if (entry.dtype == dtype) return &entry;
  }
  return absl::UnimplementedError(
      absl::StrCat(Sv(what), ": ", Sv(DTypeName(dtype)), Sv(kNoFp8InV2)));
}

// The rank of a shape written for people: "[B,H] (varlen [N,H])" -> 2; nullopt when the text
// does not start with a bracketed list.
std::optional<int> BracketRank(std::string_view shape) {
  if (shape.empty() || shape.front() != '[') return std::nullopt;
  const size_t end = shape.find(']');
  if (end == std::string_view::npos || end == 1) return std::nullopt;
  return static_cast<int>(std::count(shape.begin(), shape.begin() + end, ',')) + 1;
}

// The input that "<what> of NAME" names, or null.
const InputSchema* OfInput(const KernelSchema& schema, std::string_view text,
                           std::string_view what) {
  const std::string prefix = absl::StrCat(Sv(what), " of ");
  if (!absl::StartsWith(Sv(text), prefix)) return nullptr;
  std::string_view name = text.substr(prefix.size());
  name = name.substr(0, name.find_first_of(" ;,("));
  return schema.FindInput(name);
}

absl::Status AddTensor(std::string_view name, const TensorListing& listing,
                       inference::ModelMetadataResponse::TensorMetadata* out) {
  KS_ASSIGN_OR_RETURN(const std::string_view datatype,
                      DatatypeName(listing.dtype, absl::StrCat("tensor '", Sv(name), "'")));
  out->set_name(std::string(name));
  out->set_datatype(std::string(datatype));
  for (int i = 0; i < listing.rank; ++i) out->add_shape(-1);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> DTypeFromDatatype(std::string_view datatype, std::string_view what) {
  for (const DatatypeEntry& entry : kDatatypes) {
    if (entry.name == datatype) return entry.dtype;
  }
  if (absl::StartsWithIgnoreCase(Sv(datatype), "FP8") ||
      absl::StartsWithIgnoreCase(Sv(datatype), "F8") ||
      absl::StartsWithIgnoreCase(Sv(datatype), "FLOAT8")) {
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(what), ": datatype '", Sv(datatype.substr(0, 32)), "' is not served", Sv(kNoFp8InV2)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(what), ": datatype '", Sv(datatype.substr(0, 32)),
                   "' is not served; expected one of FP32, FP16, BF16, INT32, INT64, BOOL"));
}

absl::StatusOr<std::string_view> DatatypeName(DType dtype, std::string_view what) {
  KS_ASSIGN_OR_RETURN(const DatatypeEntry* entry, EntryOf(dtype, what));
  return entry->name;
}

absl::StatusOr<inference::DataType> ConfigDataType(DType dtype, std::string_view what) {
  KS_ASSIGN_OR_RETURN(const DatatypeEntry* entry, EntryOf(dtype, what));
  return entry->config;
}

absl::Status CheckVersion(std::string_view model, std::string_view version) {
  if (version.empty() || version == kModelVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model '", Sv(model), "' has no version '",
                                          Sv(version.substr(0, 32)), "'; its one version is '",
                                          Sv(kModelVersion), "'"));
}

TensorListing ListInput(const InputSchema& input) {
  TensorListing listing;
  if (!input.dtypes.empty()) listing.dtype = input.dtypes.front();
  // The first dtype the protocol has a datatype for (fp8 has none); fp8 when there is none.
  for (DType dtype : input.dtypes) {
    if (!IsFp8(dtype)) {
      listing.dtype = dtype;
      break;
    }
  }
  if (!input.ranks.empty())
    listing.rank = *std::max_element(input.ranks.begin(), input.ranks.end());
  return listing;
}

absl::StatusOr<TensorListing> ListOutput(const KernelSchema& schema, const OutputSchema& output) {
  TensorListing listing;
  if (const InputSchema* like = OfInput(schema, output.dtype, "dtype")) {
    listing.dtype = ListInput(*like).dtype;
  } else {
    absl::StatusOr<DType> dtype = ParseDType(output.dtype);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(schema.name, " output '", output.name,
                                                     "': dtype '", output.dtype,
                                                     "' is neither a dtype nor 'dtype of INPUT'"));
    }
    listing.dtype = *dtype;
  }
  if (const InputSchema* like = OfInput(schema, output.shape, "shape")) {
    listing.rank = ListInput(*like).rank;
  } else if (std::optional<int> rank = BracketRank(output.shape)) {
    listing.rank = *rank;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(schema.name, " output '", output.name, "': shape '", output.shape,
                     "' is neither '[A,B,...]' nor 'shape of INPUT'"));
  }
  return listing;
}

absl::Status ToModelMetadata(const KernelSchema& schema, inference::ModelMetadataResponse* out) {
  out->set_name(schema.name);
  out->add_versions(std::string(kModelVersion));
  out->set_platform("kernelserve");
  for (const InputSchema& input : schema.inputs) {
    KS_RETURN_IF_ERROR(AddTensor(input.name, ListInput(input), out->add_inputs()));
  }
  for (const OutputSchema& output : schema.outputs) {
    KS_ASSIGN_OR_RETURN(const TensorListing listing, ListOutput(schema, output));
    KS_RETURN_IF_ERROR(AddTensor(output.name, listing, out->add_outputs()));
  }
  return absl::OkStatus();
}

absl::Status ToModelConfig(const KernelSchema& schema, inference::ModelConfig* out) {
  out->set_name(schema.name);
  out->set_platform("kernelserve");
  out->set_backend("kernelserve");
  out->set_max_batch_size(0);
  for (const InputSchema& input : schema.inputs) {
    const TensorListing listing = ListInput(input);
    KS_ASSIGN_OR_RETURN(const inference::DataType data_type,
                        ConfigDataType(listing.dtype, absl::StrCat("input '", input.name, "'")));
    inference::ModelInput* in = out->add_input();
    in->set_name(input.name);
    in->set_data_type(data_type);
    for (int i = 0; i < listing.rank; ++i) in->add_dims(-1);
    in->set_optional(!input.required);
  }
  for (const OutputSchema& output : schema.outputs) {
    KS_ASSIGN_OR_RETURN(const TensorListing listing, ListOutput(schema, output));
    KS_ASSIGN_OR_RETURN(const inference::DataType data_type,
                        ConfigDataType(listing.dtype, absl::StrCat("output '", output.name, "'")));
    inference::ModelOutput* o = out->add_output();
    o->set_name(output.name);
    o->set_data_type(data_type);
    for (int i = 0; i < listing.rank; ++i) o->add_dims(-1);
  }
  return absl::OkStatus();
}

}  // namespace kernelserve::kserve
