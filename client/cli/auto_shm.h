// --shared-memory of run and bench: whether a call's tensors go through a system shared-memory
// region of this host instead of the message. The default, auto, takes a region when the server
// is local, says it serves system regions and the call is large; none (or off) never does;
// system always does (an error when the server refuses); cuda (bench) a GPU buffer.
// All functions are thread-compatible: they use the caller's client and request only.
#ifndef KERNELSERVE_CLIENT_CLI_AUTO_SHM_H_
#define KERNELSERVE_CLIENT_CLI_AUTO_SHM_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/args.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::cli {

// Under --shared-memory=auto, a call whose inline input bytes (summed) reach this goes through
// a system region. Below it, making, mapping and registering a region (two RPCs and a few
// syscalls, about a millisecond) costs more than the copies of the bytes into the message and
// out of it save; at 1 MiB those copies (serialize, socket, parse: ~3 per byte) take about as
// long, and above it they dominate. Output bytes do not count: they are known after a call only.
inline constexpr uint64_t kAutoSharedMemoryMinBytes = uint64_t{1} << 20;

enum class SharedMemoryMode {
  kAuto,    // a system region when the target is local, the server serves one, the call large
  kNone,    // tensors always in the message
  kSystem,  // always a system region; the server's refusal is the command's error
  kCuda,    // bench only: a GPU buffer registered as a CUDA region
};

// --shared-memory: auto (default), none (or off), system, or cuda where `cuda_allowed`.
// InvalidArgument naming the accepted values.
absl::StatusOr<SharedMemoryMode> SharedMemoryModeFromArgs(const Args& args, bool cuda_allowed);

// Whether gRPC target `target` is on this host: "unix:" and "unix-abstract:" sockets,
// 127.x.y.z, localhost and [::1] (with or without a port or a "dns:", "ipv4:" or "ipv6:"
// scheme).
bool IsLocalTarget(absl::string_view target);

// The bytes of `request`'s inputs sent in the message (resident and region inputs not counted).
uint64_t InlineInputBytes(const v1::ExecuteRequest& request);

// Under kAuto: whether `request` should go through a system region: `target` is local, its
// inline input bytes reach kAutoSharedMemoryMinBytes, and the server's GetServerInfo lists
// "system" in shared_memory (a server that lists nothing, or does not answer, means no). Asks
// the server only when the first two hold.
bool AutoWantsSharedMemory(const Client& client, absl::string_view target,
                           const v1::ExecuteRequest& request);

// Moves the inline inputs of `request` into a new system region `name` registered with the
// server of `client` (sized for them, each at a 256-byte aligned offset) and makes them
// references; outputs stay in the answer. `request` is unchanged on failure: the error of
// SharedMemoryRegion::CreateSystem. The region stays registered until destroyed, which
// unregisters it and removes its object.
// REQUIRES: `client` outlives the region.
absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> MoveInputsIntoSharedMemory(
    const Client& client, const std::string& name, v1::ExecuteRequest* request);

// The one line auto writes to `err` when the server refuses its region, after which the call
// goes with its tensors in the message.
void NoteSharedMemoryFallback(const absl::Status& refusal, std::ostream& err);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_AUTO_SHM_H_
