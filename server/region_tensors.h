// Tensors that live in registered shared-memory regions, for the call pipeline's TakeInputs
// (server/pipeline.h) whichever the protocol: inputs read in place (index inputs copied),
// outputs written into their regions.
#ifndef KERNELSERVE_SERVER_REGION_TENSORS_H_
#define KERNELSERVE_SERVER_REGION_TENSORS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/executor.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/region_ref.h"
#include "server/identity.h"
#include "server/shared_memory.h"

namespace kernelserve::server {

// Where outputs go, by output name; each span holds its region mapped.
using OutputSpans = std::map<std::string, RegionSpan>;

// The inputs of `refs` (each of `specs`) in the caller's regions, for a call on `device` (-1 =
// the CPU), each region counted in `held` (nullptr = not counted; see CallRegions). Floating
// tensors read their region in place, holding it mapped: host tensors for a system region (a
// copy when the bytes are not 16-byte aligned, as tensors are), views of the GPU bytes
// (Tensor::device()) for a CUDA region. Index tensors (every other dtype: lengths, segment ids,
// masks) are copied into the call's own host memory, so that the bytes the server checks are
// the bytes the kernel reads whatever the client writes meanwhile. NotFound for a region the
// caller has not registered; InvalidArgument naming the input when its range is past the
// region or its object or is not its tensor's size, when a CUDA region's tensor is not 16-byte
// aligned or the call runs on the CPU; FailedPrecondition for a damaged region (see
// SharedMemoryRegistry::Span); Unimplemented when `registry` is null.
absl::StatusOr<TensorMap> InputsFromRegions(const SharedMemoryRegistry* registry,
                                            const Caller& caller, const RegionRefs& refs,
                                            const TensorSpecMap& specs, int device,
                                            CallRegions* held);

// The tensor of `spec` at `span` (a region's bytes, or a resident tensor's) for a call on
// `device` (-1 = the CPU), `place` naming where it is in messages ("CUDA region 'r'"): a view
// of a floating tensor in place (host memory 16-byte aligned; GPU memory, Tensor::device()),
// else a copy in the call's host memory (index tensors; GPU bytes copied through `gpu`).
// InvalidArgument when the span is not the spec's size, for GPU bytes when the call runs on the
// CPU or their address is not 16-byte aligned.
absl::StatusOr<Tensor> TensorInSpan(GpuMemoryAccess* gpu, const TensorSpec& spec, RegionSpan span,
                                    int device, const std::string& what, const std::string& place);

// The spans of the outputs of `refs` in the caller's regions, each region counted in `held`
// (nullable): each an output `plan` produces (InvalidArgument naming it otherwise) with room
// for its bytes, in a CUDA region only when the plan runs on a GPU. Errors as
// InputsFromRegions.
absl::StatusOr<OutputSpans> OutputSpansOf(const SharedMemoryRegistry* registry,
                                          const Caller& caller, const CallPlan& plan,
                                          const RegionRefs& refs, CallRegions* held);

// The GPU of a CUDA region of the caller's that `inputs` or `outputs` name, where a call that
// names no device should run; nullopt when none does (a region not registered is left to the
// errors above).
std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry, const Caller& caller,
                              const RegionRefs& inputs, const RegionRefs& outputs);
// The same for the refs and output_regions of a kernelserve.v1 request.
std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry, const Caller& caller,
                              const v1::ExecuteRequest& request);

// The outputs of `spans` a GPU call writes straight into their regions, as tensors of the
// plan's output specs viewing them (Executor::Run's output_places): those in CUDA regions
// (copied on the GPU) and, when the plan runs on a GPU, those in pinned system regions (one
// DMA). The rest FillResponse copies.
TensorMap OutputPlaces(const CallPlan& plan, const OutputSpans& spans);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_REGION_TENSORS_H_
