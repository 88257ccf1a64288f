// Resident tensors a kernel call names, for the call pipeline's TakeInputs (server/pipeline.h):
// inputs read in place, outputs written into them, each held by the call (CallRegions) and
// locked for it (ResidentLease).
#ifndef KERNELSERVE_SERVER_RESIDENT_REFS_H_
#define KERNELSERVE_SERVER_RESIDENT_REFS_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/executor.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "server/identity.h"
#include "server/region_tensors.h"
#include "server/resident.h"

namespace kernelserve::server {

// A call's tensor (input or output name) -> the resident tensor it names.
using ResidentRefs = std::map<std::string, std::string>;

// What a request states of a resident input: dtype and shape, each optional (unset = the
// tensor's). A value type.
struct StatedSpec {
  std::optional<DType> dtype;
  std::optional<Shape> shape;
};

// True when `schema` marks `input` as updated in place by the kernel (InputSchema::updated).
bool IsUpdated(const KernelSchema& schema, const std::string& input);

// The inputs of `refs` as tensors of the caller's resident tensors, for a call on `device` (-1 =
// the CPU), each held in `held` and added to `lease` to read, or to write for an input `schema`
// marks updated. `stated` has what the request says of each (missing = nothing). As
// TensorInSpan: floating tensors read in place, index tensors copied. NotFound for a tensor the
// caller does not have; InvalidArgument naming the input when the request states another dtype
// or shape, for a GPU tensor in a CPU call, or for an updated input whose tensor lies elsewhere
// than the call runs; Unimplemented when `resident` is null.
absl::StatusOr<TensorMap> InputsFromResident(const ResidentTensors* resident, const Caller& caller,
                                             const KernelSchema& schema, const ResidentRefs& refs,
                                             const std::map<std::string, StatedSpec>& stated,
                                             int device, CallRegions* held, ResidentLease* lease);

// Adds to `spans` the outputs of `outputs`, written in place into the caller's resident tensors,
// each held in `held` and added to `lease` to write. Each must be an output `plan` produces,
// of the tensor's dtype and shape exactly; a GPU tensor only for a call on a GPU; one tensor
// for one output; and a tensor the call also reads (`inputs`) only through the input the
// kernel's schema names in the output's in_place_of. InvalidArgument naming the output
// otherwise; NotFound and Unimplemented as InputsFromResident.
absl::Status OutputsToResident(const ResidentTensors* resident, const Caller& caller,
                               const CallPlan& plan, const ResidentRefs& outputs,
                               const ResidentRefs& inputs, OutputSpans* spans, CallRegions* held,
                               ResidentLease* lease);

// Sets the dtype and shape of each input of `request` that names a resident tensor of the
// caller's and leaves them unset, so that the call is planned with them. NotFound naming the
// input for a tensor the caller does not have; InvalidArgument naming it when the request
// states another dtype or shape. Unimplemented when `resident` is null and one is named.
absl::Status FillResidentSpecs(const ResidentTensors* resident, const Caller& caller,
                               v1::ExecuteRequest* request);

// The GPU a request's data lies on, where a call that names no device runs: the GPU of the
// CUDA regions and resident tensors it names (inputs and outputs; names that do not resolve
// are left to the errors above); nullopt when none is on a GPU. InvalidArgument naming two of
// them when they lie on different GPUs.
absl::StatusOr<std::optional<int>> DataGpu(const SharedMemoryRegistry* regions,
                                           const ResidentTensors* resident, const Caller& caller,
                                           const v1::ExecuteRequest& request);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_RESIDENT_REFS_H_
