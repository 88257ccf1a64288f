#include "kernels/runtime/cuda/cuda_run.h"

#include <chrono>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/runtime/cuda/cuda_check.h"

namespace kernelserve::cuda {

CudaRun::CudaRun(int ordinal, DeviceThreadResources* resources)
    : ordinal_(ordinal), resources_(resources) {}

CudaRun::~CudaRun() {
  // Errors cannot be reported from a destructor. A run that ends before its launch still waits
  // for its copies: their page-locked sources are the caller's only while the run lives.
  if (uploads_pending_) (void)cudaStreamSynchronize(stream());
  if (start_ != nullptr) (void)cudaEventDestroy(start_);
  if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
}

absl::Status CudaRun::InitEvents() {
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
  KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> CudaRun::Upload(const void* source, size_t bytes) {
  const auto started = std::chrono::steady_clock::now();
  input_bytes_ += static_cast<int64_t>(bytes);
  cudaPointerAttributes attributes{};
  if (bytes > 0) KS_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, source));
  const bool on_gpu = attributes.type == cudaMemoryTypeDevice;
  if (on_gpu && attributes.device == ordinal_) {
    const char* begin = static_cast<const char*>(source);
    in_place_inputs_.emplace_back(begin, begin + bytes);
    return DeviceBuffer::View(const_cast<void*>(source), bytes);
  }
  KS_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(ordinal_, bytes, stream()));
  if (on_gpu) {  // another GPU's memory: a peer copy
    KS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(buffer.get(), source, bytes, cudaMemcpyDefault, stream()));
    KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  } else if (bytes > 0) {
    uploads_pending_ = true;
    KS_RETURN_IF_ERROR(resources_->Upload(source, bytes, buffer.get(), stream()));
  }
  upload_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return buffer;
}

absl::Status CudaRun::FinishUploads() {
  if (!uploads_pending_) return absl::OkStatus();
  const auto started = std::chrono::steady_clock::now();
  uploads_pending_ = false;
  KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  upload_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return absl::OkStatus();
}

absl::Status CudaRun::AddOutputAt(const std::string& name, DType dtype, const Shape& shape,
                                  std::function<void(void*)> set_address) {
  KS_ASSIGN_OR_RETURN(const int64_t count, NumElements(shape));
  const size_t bytes = static_cast<size_t>(count) * ItemSize(dtype);
  Output output{name, dtype, shape, DeviceBuffer(), std::move(set_address)};
  KS_ASSIGN_OR_RETURN(output.buffer, DeviceBuffer::Allocate(ordinal_, bytes, stream()));
  output.set_address(output.buffer.get());
  outputs_.push_back(std::move(output));
  return absl::OkStatus();
}

absl::Status CudaRun::BindOutputs(const TensorMap& places) {
  for (Output& output : outputs_) {
    auto place = places.find(output.name);
    if (place == places.end()) continue;
    const Tensor& to = place->second;
    if (to.device() != ordinal_ || to.nbytes() != output.buffer.size() || to.nbytes() == 0) {
      continue;  // FetchInto copies it
    }
    const char* begin = static_cast<const char*>(to.data());
    const char* end = begin + to.nbytes();
    bool read_in_place = false;
    for (const auto& [input_begin, input_end] : in_place_inputs_) {
      read_in_place = read_in_place || (begin < input_end && input_begin < end);
    }
    if (read_in_place) continue;  // written over an input: FetchInto copies it after the kernel
    output.buffer = DeviceBuffer::View(const_cast<void*>(to.data()), to.nbytes());
    output.set_address(output.buffer.get());
    output.bound = true;
    launched_ = false;  // what earlier launches wrote is elsewhere
  }
  return absl::OkStatus();
}

absl::StatusOr<double> CudaRun::TimedLaunch(absl::FunctionRef<cudaError_t(cudaStream_t)> enqueue) {
  launched_ = false;
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  KS_RETURN_IF_ERROR(FinishUploads());
  {
    // The stream waits at the gate while the host queues the events and the launch: the
    // events then time the kernel, not the host's queuing (launch_seconds).
    const bool gated = LaunchGated(input_bytes_);
    if (gated) KS_CUDA_RETURN_IF_ERROR(resources_->gate().Close(stream()));
    const absl::Cleanup open = [this, gated] {
      if (gated) resources_->gate().Open();
    };
    const auto started = std::chrono::steady_clock::now();
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream()));
    KS_CUDA_RETURN_IF_ERROR(enqueue(stream()));
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream()));
    launch_seconds_ =
        gated ? std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
              : 0.0;
  }
  KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
  float ms = 0.0f;
  KS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
  launched_ = true;
  return static_cast<double>(ms) * 1e-3;
}

absl::StatusOr<TensorMap> CudaRun::Fetch() { return FetchInto(TensorMap()); }

absl::StatusOr<TensorMap> CudaRun::FetchInto(const TensorMap& places) {
  if (!launched_) return absl::FailedPreconditionError("Fetch before a successful Launch");
  TensorMap outputs;
  bool copied_on_gpu = false;
  for (const Output& output : outputs_) {
    if (auto place = places.find(output.name); place != places.end()) {
      const Tensor& to = place->second;
      if (output.bound) {  // the launch wrote it there
        outputs.emplace(output.name, to);
        continue;
      }
      if (to.nbytes() != output.buffer.size()) {
        return absl::InvalidArgumentError(absl::StrCat("output '", output.name,
                                                       "': its place holds ", to.nbytes(),
                                                       " bytes; expected ", output.buffer.size()));
      }
      void* into = const_cast<void*>(to.data());
      if (to.device() >= 0) {  // any GPU's memory: copied on the GPU
        KS_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(into, output.buffer.get(), to.nbytes(), cudaMemcpyDefault, stream()));
        copied_on_gpu = true;
      } else {  // host memory: one DMA when pinned, else staged
        KS_RETURN_IF_ERROR(resources_->Download(output.buffer.get(), to.nbytes(), into, stream()));
      }
      outputs.emplace(output.name, to);  // a view: the copy shares the bytes
      continue;
    }
    // Into page-locked memory from the pool (one DMA, no zero-fill; gRPC sends it from there)
    // when it has room, else into the heap through the staging buffer.
    Tensor host;
    if (std::shared_ptr<HostBuffer> pinned = PinnedHostPool()->TryAllocate(output.buffer.size());
        pinned != nullptr) {
      KS_ASSIGN_OR_RETURN(host, Tensor::FromBuffer(output.dtype, output.shape, std::move(pinned)));
    } else {
      host = Tensor::Empty(output.dtype, output.shape);
    }
    KS_RETURN_IF_ERROR(
        resources_->Download(output.buffer.get(), host.nbytes(), host.data(), stream()));
    outputs.emplace(output.name, std::move(host));
  }
  if (copied_on_gpu) KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  return outputs;
}

absl::Status CudaRun::PoisonOutputs() {
  KS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  for (const Output& output : outputs_) {
    if (output.buffer.size() == 0) continue;
    KS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(output.buffer.get(), 0xff, output.buffer.size(), stream()));
  }
  KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  return absl::OkStatus();
}

absl::Status PoisonOutputs(PreparedRun& run) {
  auto* cuda_run = dynamic_cast<CudaRun*>(&run);
  if (cuda_run == nullptr) return absl::InvalidArgumentError("PoisonOutputs: not a CUDA run");
  return cuda_run->PoisonOutputs();
}

}  // namespace kernelserve::cuda
