#include "server/region_tensors.h"

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::server {
namespace {

absl::Status NoRegistry() {
  return absl::UnimplementedError("this server keeps no shared memory regions");
}

// A tensor in GPU memory (a CUDA region, a resident tensor) at `place`, for a call on GPU
// `device`: a view of the GPU bytes for a float tensor (fp8 too), read in place by the kernel; a
// host copy for an index tensor (lengths, segment ids, masks), which the server checks on the host.
absl::StatusOr<Tensor> TensorInGpuMemory(GpuMemoryAccess* gpu, const TensorSpec& spec,
                                         RegionSpan span, int device, const std::string& what,
                                         const std::string& place) {
  const int on = span.region->device();
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is in ", place, " on GPU ", on,
        ", which a call on the CPU cannot read; leave device and platform unset, or name GPU ",
        on));
  }
  if (!HoldsFloats(spec.dtype)) {
    if (gpu == nullptr) return absl::InternalError(absl::StrCat(what, ": no GPU access"));
    std::string bytes(span.byte_size, '\0');
    if (absl::Status copied = gpu->CopyToHost(bytes.data(), span.data, bytes.size());
        !copied.ok()) {
      return absl::Status(copied.code(), absl::StrCat(what, ": ", copied.message()));
    }
    return Tensor::FromBytes(spec.dtype, spec.shape, std::move(bytes));
  }
  constexpr uintptr_t kTensorAlignment = 16;  // the kernels' vector loads
  if (reinterpret_cast<uintptr_t>(span.data) % kTensorAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": its offset in ", place, " must be a multiple of 16"));
  }
  char* data = span.data;
  auto buffer = std::make_shared<HostBuffer>(
      data, span.byte_size, /*pinned=*/false,
      [region = std::move(span.region)](void* /*data*/) mutable { region.reset(); },
      /*view=*/true, on);
  return Tensor::FromBuffer(spec.dtype, spec.shape, std::move(buffer));
}

}  // namespace

absl::StatusOr<Tensor> TensorInSpan(GpuMemoryAccess* gpu, const TensorSpec& spec, RegionSpan span,
                                    int device, const std::string& what, const std::string& place) {
  const int64_t bytes = SpecBytes(spec).value_or(-1);
  if (bytes < 0 || static_cast<uint64_t>(bytes) != span.byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": byte_size ", span.byte_size, " in ",
                                                   place, " is not the ", bytes, " bytes of ",
                                                   spec.DebugString()));
  }
  if (span.region->device() >= 0) {
    return TensorInGpuMemory(gpu, spec, std::move(span), device, what, place);
  }
  constexpr uintptr_t kTensorAlignment = 16;  // what Tensor promises kernels (malloc's)
  // Index tensors are checked on the host before the kernel reads them (a kernel may read them
  // again, e.g. on the GPU): the client's later writes must not change them.
  if (!HoldsFloats(spec.dtype) || reinterpret_cast<uintptr_t>(span.data) % kTensorAlignment != 0) {
    return Tensor::FromBytes(spec.dtype, spec.shape, std::string(span.data, span.byte_size));
  }
  char* data = span.data;
  auto buffer = std::make_shared<HostBuffer>(
      data, span.byte_size, /*pinned=*/false,
      [region = std::move(span.region)](void* /*data*/) mutable { region.reset(); });
  return Tensor::FromBuffer(spec.dtype, spec.shape, std::move(buffer));
}

absl::StatusOr<TensorMap> InputsFromRegions(const SharedMemoryRegistry* registry,
                                            const Caller& caller, const RegionRefs& refs,
                                            const TensorSpecMap& specs, int device,
                                            CallRegions* held) {
  TensorMap inputs;
  if (refs.empty()) return inputs;
  if (registry == nullptr) return NoRegistry();
  for (const auto& [name, ref] : refs) {
    const std::string what = absl::StrCat("input '", name, "'");
    auto spec = specs.find(name);
    if (spec == specs.end()) return absl::InternalError(absl::StrCat(what, ": no spec"));
    KS_ASSIGN_OR_RETURN(RegionSpan span,
                        registry->Span(caller, ref.region, ref.offset, ref.byte_size, what));
    if (held != nullptr) held->Add(span);
    const std::string place =
        absl::StrCat(span.region->device() >= 0 ? "CUDA" : "system", " region '", ref.region, "'");
    KS_ASSIGN_OR_RETURN(inputs[name], TensorInSpan(registry->gpu(), spec->second, std::move(span),
                                                   device, what, place));
  }
  return inputs;
}

absl::StatusOr<OutputSpans> OutputSpansOf(const SharedMemoryRegistry* registry,
                                          const Caller& caller, const CallPlan& plan,
                                          const RegionRefs& refs, CallRegions* held) {
  OutputSpans spans;
  if (refs.empty()) return spans;
  if (registry == nullptr) return NoRegistry();
  const TensorSpecMap produced = plan.kernel->OutputSpecs(*plan.problem);
  for (const auto& [name, ref] : refs) {
    const std::string what = absl::StrCat("output '", name, "'");
    auto spec = produced.find(name);
    if (spec == produced.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a region but is not produced by this call"));
    }
    const int64_t bytes = SpecBytes(spec->second).value_or(-1);
    if (bytes < 0 || static_cast<uint64_t>(bytes) > ref.byte_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", bytes, " bytes (", spec->second.DebugString(), ") do not fit byte_size ",
          ref.byte_size, " in region ", Quoted(ref.region)));
    }
    KS_ASSIGN_OR_RETURN(RegionSpan span,
                        registry->Span(caller, ref.region, ref.offset, ref.byte_size, what));
    if (held != nullptr) held->Add(span);
    if (span.region->device() >= 0 && plan.ordinal() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is in CUDA region '", ref.region, "' on GPU ", span.region->device(),
          ", which a call on the CPU cannot write; leave device and platform unset, or name GPU ",
          span.region->device()));
    }
    spans[name] = std::move(span);
  }
  return spans;
}

TensorMap OutputPlaces(const CallPlan& plan, const OutputSpans& spans) {
  TensorMap places;
  if (spans.empty() || plan.ordinal() < 0) return places;
  const TensorSpecMap produced = plan.kernel->OutputSpecs(*plan.problem);
  for (const auto& [name, span] : spans) {
    auto spec = produced.find(name);
    const bool direct = span.region->device() >= 0 || span.region->pinned();
    if (!direct || spec == produced.end()) continue;
    const int64_t bytes = SpecBytes(spec->second).value_or(-1);  // OutputSpansOf checked the room
    auto buffer = std::make_shared<HostBuffer>(
        span.data, static_cast<size_t>(bytes), /*pinned=*/false,
        [region = span.region](void* /*data*/) {}, /*view=*/true, span.region->device());
    absl::StatusOr<Tensor> place =
        Tensor::FromBuffer(spec->second.dtype, spec->second.shape, std::move(buffer));
    if (place.ok()) places.emplace(name, *std::move(place));
  }
  return places;
}

std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry, const Caller& caller,
                              const RegionRefs& inputs, const RegionRefs& outputs) {
  if (registry == nullptr || !registry->cuda()) return std::nullopt;
  for (const RegionRefs* refs : {&inputs, &outputs}) {
    for (const auto& [name, ref] : *refs) {
      if (ref.region.empty()) continue;  // "" would list every region
      absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> found =
          registry->List(caller, "", ref.region);
      if (found.ok() && found->size() == 1 && found->front()->device() >= 0) {
        return found->front()->device();
      }
    }
  }
  return std::nullopt;
}

std::optional<int> RegionsGpu(const SharedMemoryRegistry* registry, const Caller& caller,
                              const v1::ExecuteRequest& request) {
  if (registry == nullptr || !registry->cuda()) return std::nullopt;
  RegionRefs inputs;
  for (const auto& [name, tensor] : request.inputs()) {
    if (tensor.has_ref()) inputs[name] = {tensor.ref().region(), 0, 0};
  }
  RegionRefs outputs;
  for (const auto& [name, ref] : request.output_regions()) outputs[name] = {ref.region(), 0, 0};
  return RegionsGpu(registry, caller, inputs, outputs);
}

}  // namespace kernelserve::server
