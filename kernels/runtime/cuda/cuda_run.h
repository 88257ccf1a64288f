// CudaRun: what every CUDA PreparedRun shares. A kernel's CUDA run derives from it: its Init
// uploads the inputs (Upload) and declares the outputs (AddOutput); its Launch checks the
// config and queues the kernel through TimedLaunch. Fetch, the events, the upload time and the
// poisoning of outputs for tests live here once.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RUN_H_
#define KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RUN_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/kernel.h"
#include "kernels/runtime/cuda/cuda_resources.h"

namespace kernelserve::cuda {

// Thread safety: one thread at a time (see PreparedRun), the thread whose resources it uses.
class CudaRun : public PreparedRun {
 public:
  ~CudaRun() override;
  CudaRun(const CudaRun&) = delete;
  CudaRun& operator=(const CudaRun&) = delete;

  double upload_seconds() const override { return upload_seconds_; }
  double launch_seconds() const override { return launch_seconds_; }
  // The outputs of the last successful launch, downloaded through the thread's staging
  // buffer. FailedPrecondition before a successful launch.
  absl::StatusOr<TensorMap> Fetch() override;
  // The outputs of `places` in this run's GPU memory (and of their size) become those bytes:
  // the next Launch writes them in place; but a place that overlaps an input read in place
  // (Upload), which the kernel must read as it was, is copied into after the kernel
  // (FetchInto). REQUIRES: a Launch follows before Fetch.
  absl::Status BindOutputs(const TensorMap& places) override;
  // Fetch, with the outputs of `places` copied into those tensors (views): on the GPU for GPU
  // memory (any GPU; across GPUs through peer copies), by DMA for host memory (staged when not
  // page-locked). InvalidArgument for a place of the wrong size.
  absl::StatusOr<TensorMap> FetchInto(const TensorMap& places) override;

  // Fills every output with 0xff bytes (a NaN in f32, f16 and bf16) and waits, so that an
  // element the next launch leaves unwritten shows in a test.
  absl::Status PoisonOutputs();

 protected:
  // For the calling thread's work on device `ordinal`. REQUIRES: `resources` is the calling
  // thread's (ThisThreadResources(ordinal)), outliving the run.
  CudaRun(int ordinal, DeviceThreadResources* resources);

  // Creates the timing events; the derived Init calls it first.
  absl::Status InitEvents();
  // A device buffer holding the `bytes` bytes at `source` (empty for 0 bytes): `source` itself
  // when it is memory of this run's GPU (a tensor in a CUDA shared-memory region, read in
  // place), else a copy (from the host, or from another GPU). A copy from the host is queued on
  // the stream: TimedLaunch waits for all of them before it launches, and that wait counts in
  // upload_seconds with the queuing. REQUIRES: page-locked `source` memory stays as it is while
  // the run lives (the run waits for its copies before it ends).
  absl::StatusOr<DeviceBuffer> Upload(const void* source, size_t bytes);
  // Allocates output `name` of `dtype` and `shape` on the device, for Fetch and
  // PoisonOutputs, and stores its address (null for an empty output) in `*address`, where the
  // kernel's launch reads it; BindOutputs may store another there later.
  template <typename T>
  absl::Status AddOutput(const std::string& name, DType dtype, const Shape& shape, T** address) {
    return AddOutputAt(name, dtype, shape, [address](void* p) { *address = static_cast<T*>(p); });
  }
  // Closes the stream's launch gate (when LaunchGated of the run's input bytes), records the start
  // event, lets `enqueue` queue the launch on the stream (returning the first launch error),
  // records the stop event, opens the gate, waits and returns the seconds between the events.
  // Gated: the kernel's time on the GPU alone, and launch_seconds the host's time spent queuing
  // it. Not gated (the default): the events also count the host's queuing up to the kernel's
  // submission, and launch_seconds is 0. The outputs are fetchable once it succeeds.
  absl::StatusOr<double> TimedLaunch(absl::FunctionRef<cudaError_t(cudaStream_t)> enqueue);

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return resources_->stream(); }
  DeviceThreadResources& resources() const { return *resources_; }

 private:
  struct Output {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
    DeviceBuffer buffer;
    std::function<void(void*)> set_address;  // tells the kernel where the output is
    bool bound = false;                      // buffer is a client's region (BindOutputs)
  };

  absl::Status AddOutputAt(const std::string& name, DType dtype, const Shape& shape,
                           std::function<void(void*)> set_address);
  // Waits for the host copies Upload queued, if any, counting the wait in upload_seconds.
  absl::Status FinishUploads();

  const int ordinal_;
  DeviceThreadResources* const resources_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  std::vector<Output> outputs_;
  bool launched_ = false;
  double upload_seconds_ = 0.0;
  bool uploads_pending_ = false;  // host copies queued since the last FinishUploads
  double launch_seconds_ = 0.0;
  int64_t input_bytes_ = 0;  // of every Upload, in place or copied (LaunchGated)
  // The inputs read in place (Upload of this GPU's memory): [begin, end) addresses.
  std::vector<std::pair<const char*, const char*>> in_place_inputs_;
};

// PoisonOutputs of `run` when it is a CUDA run; InvalidArgument otherwise. For tests.
absl::Status PoisonOutputs(PreparedRun& run);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_RUNTIME_CUDA_CUDA_RUN_H_
