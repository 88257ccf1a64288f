// Process-wide settings of a program that sends or receives large tensors over gRPC:
// kernelserve-server applies them first thing in RunServerMain (server/run.h), the kernelserve
// CLI and the bench's bare gRPC server first thing in main(). Libraries (proto/, client/, core/)
// never call these: the process's owner does, once.
#ifndef KERNELSERVE_SERVER_PROCESS_TUNING_H_
#define KERNELSERVE_SERVER_PROCESS_TUNING_H_

#include <climits>
#include <cstdint>

namespace kernelserve {

// Freed memory at the heap's top this process keeps for reuse rather than giving back to the
// kernel (glibc gives all of it back once it passes this). A 256 MiB round trip with a 256 MiB
// answer frees ~1.1 GB at once on the server; mallopt takes an int, hence not more.
inline constexpr int64_t kRetainedFreeBytes = INT_MAX;

// Before any thread starts:
// - glibc malloc keeps large freed blocks for reuse (one arena, no per-block mmap, up to
//   kRetainedFreeBytes kept at the heap's top; the server gives it back when idle). On this
//   project's machines a fresh 4 KiB page costs a fault and a zeroing; a 256 MiB tensor that
//   lands in fresh pages takes ~200 ms to write, one in reused pages ~30 ms
//   (docs/PERFORMANCE.md, the service section). Each large request allocates several such
//   buffers (received bytes, kernel output, its host copy).
// - absl::Mutex deadlock detection, on in Debian's abseil build and used by every gRPC lock,
//   is turned off (about a tenth of the CPU of a small call).
// Thread safety: call once, from main(), before any other thread starts.
void TuneProcess();

// Gives the freed memory kept by TuneProcess back to the kernel (malloc_trim); for idle times.
// Thread safety: thread-safe (glibc locks its arenas).
void ReleaseRetainedMemory();

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_PROCESS_TUNING_H_
