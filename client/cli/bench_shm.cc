#include "client/cli/bench_shm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

constexpr uint64_t kAlign = 256;  // every tensor's offset, past what the server needs (16)

uint64_t Aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::StatusOr<BenchRegion> MoveIntoSharedMemory(const Client& client, const RunResult& probe,
                                                 v1::ExecuteRequest* request, bool cuda,
                                                 int device) {
  std::map<std::string, uint64_t> offsets;  // inputs', then outputs'
  uint64_t size = 0;
  for (const auto& [name, tensor] : request->inputs()) {
    if (tensor.has_ref()) continue;  // a resident tensor's name: it stays where it is
    offsets[absl::StrCat("in:", name)] = size;
    size += Aligned(tensor.data().size());
  }
  for (const auto& [name, tensor] : probe.outputs) {
    offsets[absl::StrCat("out:", name)] = size;
    size += Aligned(tensor.nbytes());
  }
  size = std::max<uint64_t>(size, 1);
  const std::string name = absl::StrCat("bench-", getpid());
  BenchRegion where;
  if (cuda) {
    KS_ASSIGN_OR_RETURN(where.gpu, GpuBuffer::Allocate(device, size));
    KS_ASSIGN_OR_RETURN(std::string handle, where.gpu->IpcHandle());
    KS_ASSIGN_OR_RETURN(where.region, SharedMemoryRegion::RegisterCuda(
                                          client, name, handle, where.gpu->data(), size, device));
  } else {
    KS_ASSIGN_OR_RETURN(where.region, SharedMemoryRegion::CreateSystem(client, name, size));
  }
  for (auto& [input, tensor] : *request->mutable_inputs()) {
    if (tensor.has_ref()) continue;
    const uint64_t offset = offsets[absl::StrCat("in:", input)];
    const uint64_t bytes = tensor.data().size();
    if (cuda) {
      KS_RETURN_IF_ERROR(where.gpu->CopyIn(offset, tensor.data().data(), bytes));
    } else {
      std::memcpy(where.region->data() + offset, tensor.data().data(), bytes);
    }
    tensor.clear_data();
    v1::TensorRef* ref = tensor.mutable_ref();
    ref->set_region(name);
    ref->set_offset(offset);
    ref->set_byte_size(bytes);
  }
  for (const auto& [output, tensor] : probe.outputs) {
    v1::TensorRef& ref = (*request->mutable_output_regions())[output];
    ref.set_region(name);
    ref.set_offset(offsets[absl::StrCat("out:", output)]);
    ref.set_byte_size(tensor.nbytes());
  }
  return where;
}

}  // namespace kernelserve::cli
