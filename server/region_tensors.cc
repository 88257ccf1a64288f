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

int64_t SpecBytes(const TensorSpec& spec) {
  return NumElements(spec.shape).value_or(-1) * static_cast<int64_t>(ItemSize(spec.dtype));
}

absl::StatusOr<Tensor> TensorInRegion(const TensorSpec& spec, RegionSpan span,
                                      const std::string& what) {
  const int64_t bytes = SpecBytes(spec);
  if (bytes < 0 || static_cast<uint64_t>(bytes) != span.byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": byte_size ", span.byte_size, " in region '", span.region->name(),
                     "' is not the ", bytes, " bytes of ", spec.DebugString()));
  }
  constexpr uintptr_t kTensorAlignment = 16;  // what Tensor promises kernels (malloc's)
  if (reinterpret_cast<uintptr_t>(span.data) % kTensorAlignment != 0) {
    return Tensor::FromBytes(spec.dtype, spec.shape, std::string(span.data, span.byte_size));
  }
  char* data = span.data;
  auto buffer = std::make_shared<HostBuffer>(
      data, span.byte_size, /*pinned=*/false,
      [region = std::move(span.region)](void* /*data*/) mutable { region.reset(); });
  return Tensor::FromBuffer(spec.dtype, spec.shape, std::move(buffer));
}

}  // namespace

absl::StatusOr<TensorMap> InputsFromRegions(const SharedMemoryRegistry* registry,
                                            const RegionRefs& refs, const TensorSpecMap& specs) {
  TensorMap inputs;
  if (refs.empty()) return inputs;
  if (registry == nullptr) return NoRegistry();
  for (const auto& [name, ref] : refs) {
    const std::string what = absl::StrCat("input '", name, "'");
    auto spec = specs.find(name);
    if (spec == specs.end()) return absl::InternalError(absl::StrCat(what, ": no spec"));
    KS_ASSIGN_OR_RETURN(RegionSpan span,
                        registry->Span(ref.region, ref.offset, ref.byte_size, what));
    KS_ASSIGN_OR_RETURN(inputs[name], TensorInRegion(spec->second, std::move(span), what));
  }
  return inputs;
}

absl::StatusOr<OutputSpans> OutputSpansOf(const SharedMemoryRegistry* registry,
                                          const CallPlan& plan, const RegionRefs& refs) {
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
    const int64_t bytes = SpecBytes(spec->second);
    if (bytes < 0 || static_cast<uint64_t>(bytes) > ref.byte_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", bytes, " bytes (", spec->second.DebugString(),
                       ") do not fit byte_size ", ref.byte_size, " in region '", ref.region, "'"));
    }
    KS_ASSIGN_OR_RETURN(spans[name], registry->Span(ref.region, ref.offset, ref.byte_size, what));
  }
  return spans;
}

absl::StatusOr<RequestRegions> TakeRequestRegions(const SharedMemoryRegistry* registry,
                                                  const CallPlan& plan,
                                                  v1::ExecuteRequest* request) {
  RegionRefs inputs;
  TensorSpecMap specs;
  for (const auto& [name, tensor] : request->inputs()) {
    if (!tensor.has_ref()) continue;
    const std::string what = absl::StrCat("input '", name, "'");
    if (!tensor.data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data and ref both set; send the bytes one way"));
    }
    KS_ASSIGN_OR_RETURN(specs[name], SpecFromProto(tensor, what));
    inputs[name] = {tensor.ref().region(), tensor.ref().offset(), tensor.ref().byte_size()};
  }
  RegionRefs outputs;
  for (const auto& [name, ref] : request->output_regions()) {
    outputs[name] = {ref.region(), ref.offset(), ref.byte_size()};
  }
  RequestRegions regions;
  KS_ASSIGN_OR_RETURN(regions.inputs, InputsFromRegions(registry, inputs, specs));
  KS_ASSIGN_OR_RETURN(regions.outputs, OutputSpansOf(registry, plan, outputs));
  for (const auto& [name, ref] : inputs) request->mutable_inputs()->erase(name);
  return regions;
}

}  // namespace kernelserve::server
