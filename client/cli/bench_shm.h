// bench --shared-memory=system: the bench's tensors in a shared-memory region of this host.
#ifndef KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_
#define KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/cli/cuda_loader.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::cli {

// Where a bench's tensors live: a registered region (and, for a CUDA one, the GPU buffer it
// is), registered while the object lives.
struct BenchRegion {
  std::unique_ptr<GpuBuffer> gpu;  // a CUDA region's buffer; destroyed after the region
  std::unique_ptr<SharedMemoryRegion> region;
};

// Moves the inputs of `request` into a new region registered with the server of `client` and
// names every output there too (output_regions), so that each call of the bench sends and
// receives references only: a system region (`cuda` false) or this process's buffer on GPU
// `device` (`cuda` true; the CUDA runtime is loaded at run time, see GpuBuffer). `probe`, the
// answer to one call of `request` with inline bytes, gives the outputs' sizes. The server's
// error when it refuses the region (Unimplemented: that kind is off there or it has no GPU;
// NotFound: the server is on another host); a system region's refusal leaves `request` as it
// was.
absl::StatusOr<BenchRegion> MoveIntoSharedMemory(const Client& client, const RunResult& probe,
                                                 v1::ExecuteRequest* request, bool cuda,
                                                 int device);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_
