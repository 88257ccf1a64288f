// LaunchGate: holds a stream at a point until the host opens it, so that the work queued
// behind the gate starts only once the host has queued all of it. CudaRun::TimedLaunch closes
// the gate before its start event: the events then time the kernel alone, not the host's time
// spent queuing it (a cuDNN plan's execute takes tens of microseconds of host time, which an
// idle stream would otherwise count as kernel time).
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_LAUNCH_GATE_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_LAUNCH_GATE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace kernelserve::cuda {

// The longest a closed gate holds its stream, 1 ms: far more than a launch's host part takes
// (tens of microseconds), and short because the host may itself wait for the GPU while the gate
// is closed. CUDA loads a kernel's module on its first launch (lazy loading), and loading may
// wait for the context's work, the gate kernel's included: that first launch then waits out the
// timeout, once per kernel and process. A launch whose host part outlasts the timeout starts
// its events early, and its kernel time then includes the rest, as it would without a gate.
inline constexpr uint64_t kLaunchGateTimeoutNs = 1000 * 1000;

// Queues on `stream` a one-thread kernel that waits until `*flag - value`, as a signed 32-bit
// difference, is >= 0, or until `timeout_ns` have passed. `flag` is page-locked host memory
// mapped into the device's address space. The launcher of the project's convention: raw
// pointers, sizes, the stream last.
cudaError_t LaunchWaitForHost(const volatile uint32_t* flag, uint32_t value, uint64_t timeout_ns,
                              cudaStream_t stream);

// The gate costs a call latency: one more kernel (about 10 us with its release), and the kernel
// starts only once the host has queued all of it, where it would otherwise start as soon as it
// is submitted (a cuDNN plan's execute goes on for some 20 us after that). Measured on an H200:
// +20 us for the own flash attention kernel, +30-50 us for cuDNN's, +10-20 us for a tiny call.
// So no run is gated by default: a call's kernel time then counts the host's queuing up to the
// kernel's submission, as a profiler's events on an idle stream would.
inline constexpr int64_t kDefaultLaunchGateMinBytes = -1;

// Runs whose inputs hold at least `bytes` bytes wait at the gate; 0 = every run, < 0 = none.
// Thread-safe; set it once at startup.
void SetLaunchGateMinBytes(int64_t bytes);
// True when a run with `input_bytes` of inputs waits at the gate.
bool LaunchGated(int64_t input_bytes);

// One gate for one thread's stream on one device.
// Thread safety: used by one thread at a time (the stream's owner).
class LaunchGate {
 public:
  // An open gate (its flag: 4 bytes of mapped page-locked memory, readable by every device).
  static absl::StatusOr<LaunchGate> Create();
  LaunchGate() = default;
  LaunchGate(LaunchGate&& other) noexcept;
  LaunchGate& operator=(LaunchGate&& other) noexcept;
  LaunchGate(const LaunchGate&) = delete;
  LaunchGate& operator=(const LaunchGate&) = delete;
  ~LaunchGate();

  // Queues the wait on `stream`: what is queued after it starts once Open is called.
  // REQUIRES: the gate is open (every Close is followed by Open before the next Close).
  cudaError_t Close(cudaStream_t stream);
  // Lets the stream past the last Close. Call it on every path after a successful Close (an
  // error path too), or the stream waits out kLaunchGateTimeoutNs.
  void Open();

 private:
  volatile uint32_t* flag_ = nullptr;  // cudaHostAlloc(mapped); the device reads it in place
  uint32_t closed_at_ = 0;             // the value Open writes
};

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_LAUNCH_GATE_H_
