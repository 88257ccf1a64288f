// The CUDA mean pooling launcher: device pointers and sizes in, one kernel launch on a stream.
// Included by host C++ (the dispatch, the platform, the bench) and by the .cu that defines it.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_LAUNCH_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/mean_pooling/mean_pooling_form.h"

namespace kernelserve::cuda {

// The kernel's launch bound: threads per block at most (equals kPoolMaxThreads).
inline constexpr int kPoolingKernelMaxThreads = 256;

// One call's device buffers and sizes. Pointers are borrowed.
struct PoolingDeviceArgs {
  const void* x = nullptr;              // [rows, hidden] of the element type, 16-byte aligned
  void* out = nullptr;                  // [num_sequences, hidden], written in full
  const uint8_t* mask = nullptr;        // masked: [num_sequences, seq_len], nonzero = counted
  const int64_t* cu_seqlens = nullptr;  // varlen: [num_sequences + 1], valid offsets
  int64_t num_sequences = 0;            // B or N
  int64_t seq_len = 0;                  // S (dense, masked); unused in varlen
  int64_t used_rows = 0;                // rows inside sequences: B*S, or cu_seqlens[N] (varlen)
  int64_t hidden = 0;                   // H
};

// The runtime part of a config (see mean_pooling_space.h).
struct PoolingLaunchShape {
  int threads = 256;         // 32 * num_warps, at most kPoolMaxThreads
  int lanes = 64;            // config "lanes": a power of two, at most `threads`
  int64_t block_rows = 128;  // block_size
};

// Grid and workspace of one launch. The workspace holds, in order: one counter per (sequence,
// tile) that must be zero before a launch and is zero again after a successful one; one row
// count per (chunk, slot, tile) (read in the masked form only); and one float partial sum per
// (chunk, slot, column).
struct PoolingPlan {
  int64_t chunks = 0;  // gridDim.x
  int64_t tiles = 0;   // gridDim.y
  size_t counters_bytes = 0;
  size_t counts_offset = 0;
  size_t partials_offset = 0;
  size_t workspace_bytes = 0;
};

// The plan for `args` and `shape` with `vec` values per lane (PoolVectorWidth).
PoolingPlan PlanMeanPooling(const PoolingDeviceArgs& args, const PoolingLaunchShape& shape,
                            int vec);

// Launches mean pooling on `stream` and returns the launch's error (it does not wait).
// T: float, __half or __nv_bfloat16. kVec: values per lane (16 / sizeof(T), or 1).
// kStages: rows each thread loads before summing.
// REQUIRES: `workspace` holds PlanMeanPooling(args, shape, kVec).workspace_bytes bytes whose
// first counters_bytes are zero; the plan's chunks and tiles within the grid limits.
template <typename T, PoolingForm kForm, int kVec, int kStages>
cudaError_t LaunchMeanPooling(const PoolingDeviceArgs& args, const PoolingLaunchShape& shape,
                              void* workspace, cudaStream_t stream);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_LAUNCH_H_
