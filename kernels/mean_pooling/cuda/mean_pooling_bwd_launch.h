// The CUDA mean_pooling_bwd launcher: device pointers and sizes in, one kernel launch on a
// stream. Included by host C++ (the platform, the bench) and by the .cu that defines it.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LAUNCH_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kernelserve::cuda {

// One call's device buffers and sizes. Pointers are borrowed.
struct PoolingBwdDeviceArgs {
  const void* dout = nullptr;           // [num_sequences, hidden], 16-byte aligned
  void* dx = nullptr;                   // [total_rows, hidden], written in full, 16-byte aligned
  const float* counts = nullptr;        // [num_sequences]: counted rows of each sequence
  const uint8_t* mask = nullptr;        // masked: [num_sequences, seq_len], nonzero = counted
  const int64_t* cu_seqlens = nullptr;  // varlen: [num_sequences + 1], valid offsets
  int64_t num_sequences = 0;            // B or N
  int64_t seq_len = 0;                  // S (dense, masked); unused in varlen
  int64_t total_rows = 0;               // rows of dx: B*S or T
  int64_t hidden = 0;                   // H
};

// Launches mean_pooling_bwd on `stream` and returns the launch's error (it does not wait):
// dx[row] = dout[seq] / counts[seq] (float division, rounded to T) on each counted row, zeros
// elsewhere. T: float, __half or __nv_bfloat16. kVec: values per 16-byte store (16 /
// sizeof(T)), or 1. REQUIRES: hidden % kVec == 0; warps in 1..32, rows in 1..256 (see
// mean_pooling_bwd_config.h) and ceil(total_rows / rows) < 2^31.
template <typename T, int kVec>
cudaError_t LaunchMeanPoolingBwd(const PoolingBwdDeviceArgs& args, int warps, int rows,
                                 cudaStream_t stream);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_BWD_LAUNCH_H_
