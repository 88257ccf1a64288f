// bench --shared-memory=system: the bench's tensors in a shared-memory region of this host.
#ifndef KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_
#define KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::cli {

// Moves the inputs of `request` into a new system region registered with the server of
// `client`, and names every output there too (output_regions), so that each call of the bench
// sends and receives references only. One call with inline bytes first learns the outputs'
// sizes. The region lives, registered, as long as the returned object. The server's error
// when it refuses the region or the call (Unimplemented: shared memory is off there; NotFound:
// the server is on another host).
absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> MoveIntoSharedMemory(
    const Client& client, v1::ExecuteRequest* request);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_BENCH_SHM_H_
