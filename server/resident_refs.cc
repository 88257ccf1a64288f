#include "server/resident_refs.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::server {
namespace {

absl::Status NoResident() {
  return absl::UnimplementedError("this server keeps no resident tensors");
}

std::string Place(const ResidentTensor& tensor) {
  return absl::StrCat("resident tensor '", tensor.name(), "'");
}

// InvalidArgument naming `what` when `stated` says another dtype or shape than `tensor` has.
absl::Status CheckStated(const StatedSpec& stated, const ResidentTensor& tensor,
                         const std::string& what) {
  const TensorSpec& spec = tensor.spec();
  if ((stated.dtype && *stated.dtype != spec.dtype) ||
      (stated.shape && *stated.shape != spec.shape)) {
    TensorSpec said = spec;
    if (stated.dtype) said.dtype = *stated.dtype;
    if (stated.shape) said.shape = *stated.shape;
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is stated as ", said.DebugString(), " but ", Place(tensor), " is ",
                     spec.DebugString(), "; leave dtype and shape unset to take the tensor's"));
  }
  return absl::OkStatus();
}

// InvalidArgument unless `output` may be written into the tensor that input `input` reads.
absl::Status CheckInPlace(const CallPlan& plan, const std::string& output, const std::string& input,
                          const std::string& tensor) {
  for (const OutputSchema& schema : plan.kernel->schema().outputs) {
    if (schema.name == output && schema.in_place_of == input) return absl::OkStatus();
  }
  std::string allowed;
  for (const OutputSchema& schema : plan.kernel->schema().outputs) {
    if (schema.name == output && !schema.in_place_of.empty()) {
      allowed = absl::StrCat("; ", plan.kernel->name(), " writes '", output,
                             "' in place only over input '", schema.in_place_of, "'");
    }
  }
  if (allowed.empty()) {
    allowed = absl::StrCat("; ", plan.kernel->name(), " writes '", output,
                           "' in place over none of its inputs");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("output '", output, "' and input '", input, "' name the same resident tensor '",
                   tensor, "'", allowed, " (see ListKernels: OutputInfo.in_place_of)"));
}

// InvalidArgument unless `tensor`, named for an input the kernel updates in place, lies where
// the call runs (`device`, -1 = the CPU): elsewhere the call would update a copy.
absl::Status CheckUpdatedWhereCallRuns(const ResidentTensor& tensor, int device,
                                       const std::string& what) {
  if (tensor.device() == device) return absl::OkStatus();
  auto where = [](int d) { return d < 0 ? std::string("the host") : absl::StrCat("GPU ", d); };
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is updated in place by the kernel, but ", Place(tensor), " is on ",
                   where(tensor.device()), " and the call runs on ", where(device),
                   "; create the tensor where the call runs, or run the call there"));
}

}  // namespace

bool IsUpdated(const KernelSchema& schema, const std::string& input) {
  const InputSchema* declared = schema.FindInput(input);
  return declared != nullptr && declared->updated;
}

absl::StatusOr<TensorMap> InputsFromResident(const ResidentTensors* resident, const Caller& caller,
                                             const KernelSchema& schema, const ResidentRefs& refs,
                                             const std::map<std::string, StatedSpec>& stated,
                                             int device, CallRegions* held, ResidentLease* lease) {
  TensorMap inputs;
  if (refs.empty()) return inputs;
  if (resident == nullptr) return NoResident();
  for (const auto& [name, tensor_name] : refs) {
    const std::string what = absl::StrCat("input '", name, "'");
    absl::StatusOr<std::shared_ptr<ResidentTensor>> tensor = resident->Find(caller, tensor_name);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat(what, ": ", tensor.status().message()));
    }
    if (auto said = stated.find(name); said != stated.end()) {
      KS_RETURN_IF_ERROR(CheckStated(said->second, **tensor, what));
    }
    const bool updated = IsUpdated(schema, name);
    if (updated) KS_RETURN_IF_ERROR(CheckUpdatedWhereCallRuns(**tensor, device, what));
    RegionSpan span = (*tensor)->Span();
    if (held != nullptr) held->Add(span);
    KS_ASSIGN_OR_RETURN(inputs[name], TensorInSpan(resident->gpu(), (*tensor)->spec(),
                                                   std::move(span), device, what, Place(**tensor)));
    if (lease != nullptr) lease->Add(*std::move(tensor), /*write=*/updated);
  }
  return inputs;
}

absl::Status OutputsToResident(const ResidentTensors* resident, const Caller& caller,
                               const CallPlan& plan, const ResidentRefs& outputs,
                               const ResidentRefs& inputs, OutputSpans* spans, CallRegions* held,
                               ResidentLease* lease) {
  if (outputs.empty()) return absl::OkStatus();
  if (resident == nullptr) return NoResident();
  const TensorSpecMap produced = plan.kernel->OutputSpecs(*plan.problem);
  std::map<std::string, std::string> written;  // tensor -> output
  for (const auto& [name, tensor_name] : outputs) {
    const std::string what = absl::StrCat("output '", name, "'");
    auto spec = produced.find(name);
    if (spec == produced.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " names a resident tensor but is not produced by this call"));
    }
    if (auto [other, fresh] = written.emplace(tensor_name, name); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat(what, " and output '", other->second,
                                                     "' name the same resident tensor '",
                                                     tensor_name, "'"));
    }
    for (const auto& [input, input_tensor] : inputs) {
      if (input_tensor == tensor_name)
        KS_RETURN_IF_ERROR(CheckInPlace(plan, name, input, tensor_name));
    }
    absl::StatusOr<std::shared_ptr<ResidentTensor>> tensor = resident->Find(caller, tensor_name);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat(what, ": ", tensor.status().message()));
    }
    if ((*tensor)->spec() != spec->second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is ", spec->second.DebugString(),
                                                     " but ", Place(**tensor), " is ",
                                                     (*tensor)->spec().DebugString()));
    }
    if ((*tensor)->device() >= 0 && plan.ordinal() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is to go into ", Place(**tensor), " on GPU ", (*tensor)->device(),
          ", which a call on the CPU cannot write; leave device and platform unset, or name GPU ",
          (*tensor)->device()));
    }
    RegionSpan span = (*tensor)->Span();
    if (held != nullptr) held->Add(span);
    (*spans)[name] = std::move(span);
    if (lease != nullptr) lease->Add(*std::move(tensor), /*write=*/true);
  }
  return absl::OkStatus();
}

absl::Status FillResidentSpecs(const ResidentTensors* resident, const Caller& caller,
                               v1::ExecuteRequest* request) {
  for (auto& [name, tensor] : *request->mutable_inputs()) {
    if (!tensor.has_ref() || tensor.ref().tensor().empty()) continue;
    if (resident == nullptr) return NoResident();
    const std::string what = absl::StrCat("input '", name, "'");
    absl::StatusOr<std::shared_ptr<ResidentTensor>> found =
        resident->Find(caller, tensor.ref().tensor());
    if (!found.ok()) {
      return absl::Status(found.status().code(),
                          absl::StrCat(what, ": ", found.status().message()));
    }
    StatedSpec stated;
    if (tensor.dtype() != v1::DTYPE_UNSPECIFIED) {
      KS_ASSIGN_OR_RETURN(stated.dtype, FromProto(tensor.dtype(), what));
    }
    if (tensor.shape_size() > 0) stated.shape = Shape(tensor.shape().begin(), tensor.shape().end());
    KS_RETURN_IF_ERROR(CheckStated(stated, **found, what));
    tensor.set_dtype(ToProto((*found)->spec().dtype));
    tensor.clear_shape();
    for (int64_t d : (*found)->spec().shape) tensor.add_shape(d);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int>> DataGpu(const SharedMemoryRegistry* regions,
                                           const ResidentTensors* resident, const Caller& caller,
                                           const v1::ExecuteRequest& request) {
  std::vector<std::pair<int, std::string>> found;  // (GPU, what lies there)
  auto look = [&](const std::string& what, const v1::TensorRef& ref) {
    if (!ref.tensor().empty() && resident != nullptr) {
      absl::StatusOr<std::shared_ptr<ResidentTensor>> tensor = resident->Find(caller, ref.tensor());
      if (tensor.ok() && (*tensor)->device() >= 0) {
        found.emplace_back((*tensor)->device(), absl::StrCat(what, " (", Place(**tensor), ")"));
      }
    } else if (!ref.region().empty() && regions != nullptr && regions->cuda()) {
      absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> listed =
          regions->List(caller, "", ref.region());
      if (listed.ok() && listed->size() == 1 && listed->front()->device() >= 0) {
        found.emplace_back(listed->front()->device(),
                           absl::StrCat(what, " (CUDA region '", ref.region(), "')"));
      }
    }
  };
  for (const auto& [name, tensor] : request.inputs()) {
    if (tensor.has_ref()) look(absl::StrCat("input '", name, "'"), tensor.ref());
  }
  for (const auto& [name, ref] : request.output_regions()) {
    look(absl::StrCat("output '", name, "'"), ref);
  }
  if (found.empty()) return std::nullopt;
  for (const auto& [gpu, what] : found) {
    if (gpu != found.front().first) {
      return absl::InvalidArgumentError(
          absl::StrCat(found.front().second, " is on GPU ", found.front().first, " and ", what,
                       " on GPU ", gpu, "; a call runs on one GPU: move one of them"));
    }
  }
  return found.front().first;
}

}  // namespace kernelserve::server
