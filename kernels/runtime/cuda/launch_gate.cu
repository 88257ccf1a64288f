#include <atomic>
#include <cstdint>
#include <utility>

#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/launch_gate.h"

namespace kernelserve::cuda {
namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void WaitForHostKernel(const volatile uint32_t* flag, uint32_t value,
                                  uint64_t timeout_ns) {
  const uint64_t started = GlobalTimerNs();
  while (static_cast<int32_t>(*flag - value) < 0) {
    if (GlobalTimerNs() - started > timeout_ns) return;
    __nanosleep(200);
  }
}

std::atomic<int64_t>& GateMinBytes() {
  static std::atomic<int64_t> min_bytes{kDefaultLaunchGateMinBytes};
  return min_bytes;
}

}  // namespace

void SetLaunchGateMinBytes(int64_t bytes) {
  GateMinBytes().store(bytes, std::memory_order_relaxed);
}

bool LaunchGated(int64_t input_bytes) {
  const int64_t min_bytes = GateMinBytes().load(std::memory_order_relaxed);
  return min_bytes >= 0 && input_bytes >= min_bytes;
}

cudaError_t LaunchWaitForHost(const volatile uint32_t* flag, uint32_t value, uint64_t timeout_ns,
                              cudaStream_t stream) {
  WaitForHostKernel<<<1, 1, 0, stream>>>(flag, value, timeout_ns);
  return cudaGetLastError();
}

absl::StatusOr<LaunchGate> LaunchGate::Create() {
  void* flag = nullptr;
  KS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&flag, sizeof(uint32_t), cudaHostAllocMapped));
  LaunchGate gate;
  gate.flag_ = static_cast<volatile uint32_t*>(flag);
  *gate.flag_ = 0;
  return gate;
}

LaunchGate::LaunchGate(LaunchGate&& other) noexcept
    : flag_(std::exchange(other.flag_, nullptr)), closed_at_(other.closed_at_) {}

LaunchGate& LaunchGate::operator=(LaunchGate&& other) noexcept {
  std::swap(flag_, other.flag_);
  std::swap(closed_at_, other.closed_at_);
  return *this;
}

LaunchGate::~LaunchGate() {
  // Errors cannot be reported from a destructor.
  if (flag_ != nullptr) (void)cudaFreeHost(const_cast<uint32_t*>(flag_));
}

cudaError_t LaunchGate::Close(cudaStream_t stream) {
  const uint32_t next = closed_at_ + 1;
  const cudaError_t error = LaunchWaitForHost(flag_, next, kLaunchGateTimeoutNs, stream);
  if (error == cudaSuccess) closed_at_ = next;
  return error;
}

void LaunchGate::Open() {
  if (flag_ == nullptr) return;
  // A plain store to mapped memory; the device reads it over the bus (volatile: not cached).
  __atomic_store_n(const_cast<uint32_t*>(flag_), closed_at_, __ATOMIC_RELEASE);
}

}  // namespace kernelserve::cuda
