// Tensors that live in registered shared-memory regions, for the kernel call handlers of both
// protocols: inputs read in place, outputs written into their regions.
#ifndef KERNELSERVE_SERVER_REGION_TENSORS_H_
#define KERNELSERVE_SERVER_REGION_TENSORS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/executor.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/region_ref.h"
#include "server/shared_memory.h"

namespace kernelserve::server {

// Where outputs go, by output name; each span holds its region mapped.
using OutputSpans = std::map<std::string, RegionSpan>;

// The inputs of `refs` (each of `specs`) as tensors that read their region in place, holding
// it mapped (a copy when the bytes are not 16-byte aligned, as tensors are). NotFound for a
// region not registered; InvalidArgument naming the input when its range is past the region or
// not its tensor's size; Unimplemented when `registry` is null.
absl::StatusOr<TensorMap> InputsFromRegions(const SharedMemoryRegistry* registry,
                                            const RegionRefs& refs, const TensorSpecMap& specs);

// The spans of the outputs of `refs`: each an output `plan` produces (InvalidArgument naming it
// otherwise) with room for its bytes. Errors as InputsFromRegions.
absl::StatusOr<OutputSpans> OutputSpansOf(const SharedMemoryRegistry* registry,
                                          const CallPlan& plan, const RegionRefs& refs);

// The shared-memory parts of a kernelserve.v1 request, after planning: its inputs that carry a
// ref (taken out of `request`; InvalidArgument for one with data as well) and the spans of
// its output_regions.
struct RequestRegions {
  TensorMap inputs;
  OutputSpans outputs;
};
absl::StatusOr<RequestRegions> TakeRequestRegions(const SharedMemoryRegistry* registry,
                                                  const CallPlan& plan,
                                                  v1::ExecuteRequest* request);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_REGION_TENSORS_H_
