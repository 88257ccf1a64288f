// Tensors that live in registered shared-memory regions, for the kernel call handlers of both
// protocols: inputs read in place, outputs written into their regions.
#ifndef KERNELSERVE_SERVER_REGION_TENSORS_H_
#define KERNELSERVE_SERVER_REGION_TENSORS_H_

#include <map>
#include <optional>
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

// The inputs of `refs` (each of `specs`) for a call on `device` (-1 = the CPU) as tensors
// that read their region in place, holding it mapped: host tensors for a system region (a
// copy when the bytes are not 16-byte aligned, as tensors are); for a CUDA region, views of
// the GPU bytes (Tensor::device()) for floating tensors and host copies for index tensors.
// NotFound for a region not registered; InvalidArgument naming the input when its range is
// past the region or not its tensor's size, when a CUDA region's tensor is not 16-byte
// aligned or the call runs on the CPU; Unimplemented when `registry` is null.
absl::StatusOr<TensorMap> InputsFromRegions(const SharedMemoryRegistry* registry,
                                            const RegionRefs& refs, const TensorSpecMap& specs,
                                            int device);

// The spans of the outputs of `refs`: each an output `plan` produces (InvalidArgument naming it
// otherwise) with room for its bytes, in a CUDA region only when the plan runs on a GPU.
// Errors as InputsFromRegions.
absl::StatusOr<OutputSpans> OutputSpansOf(const SharedMemoryRegistry* registry,
                                          const CallPlan& plan, const RegionRefs& refs);

// The GPU of a CUDA region that `inputs` or `outputs` name, where a call that names no device
// should run; nullopt when none does (a region not registered is left to the errors above).
std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry, const RegionRefs& inputs,
                              const RegionRefs& outputs);
// The same for the refs and output_regions of a kernelserve.v1 request.
std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry,
                              const v1::ExecuteRequest& request);

// The outputs of `spans` a GPU call writes straight into their regions, as tensors of the
// plan's output specs viewing them (Executor::Run's output_places): those in CUDA regions
// (copied on the GPU) and, when the plan runs on a GPU, those in pinned system regions (one
// DMA). The rest FillResponse copies.
TensorMap OutputPlaces(const CallPlan& plan, const OutputSpans& spans);

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
