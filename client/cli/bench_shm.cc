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

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> MoveIntoSharedMemory(
    const Client& client, v1::ExecuteRequest* request) {
  KS_ASSIGN_OR_RETURN(const RunResult probe, client.Execute(*request));
  std::map<std::string, uint64_t> offsets;  // inputs', then outputs'
  uint64_t size = 0;
  for (const auto& [name, tensor] : request->inputs()) {
    offsets[absl::StrCat("in:", name)] = size;
    size += Aligned(tensor.data().size());
  }
  for (const auto& [name, tensor] : probe.outputs) {
    offsets[absl::StrCat("out:", name)] = size;
    size += Aligned(tensor.nbytes());
  }
  KS_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemoryRegion> region,
                      SharedMemoryRegion::CreateSystem(client, absl::StrCat("bench-", getpid()),
                                                       std::max<uint64_t>(size, 1)));
  for (auto& [name, tensor] : *request->mutable_inputs()) {
    const uint64_t offset = offsets[absl::StrCat("in:", name)];
    const uint64_t bytes = tensor.data().size();
    std::memcpy(region->data() + offset, tensor.data().data(), bytes);
    tensor.clear_data();
    v1::TensorRef* ref = tensor.mutable_ref();
    ref->set_region(region->name());
    ref->set_offset(offset);
    ref->set_byte_size(bytes);
  }
  for (const auto& [name, tensor] : probe.outputs) {
    v1::TensorRef& ref = (*request->mutable_output_regions())[name];
    ref.set_region(region->name());
    ref.set_offset(offsets[absl::StrCat("out:", name)]);
    ref.set_byte_size(tensor.nbytes());
  }
  return region;
}

}  // namespace kernelserve::cli
