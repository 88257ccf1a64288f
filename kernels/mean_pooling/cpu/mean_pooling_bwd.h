// The CPU mean pooling backward kernel as a free function over raw buffers.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/dtype.h"
#include "core/kernel_config.h"
#include "kernels/mean_pooling/cpu/mean_pooling.h"

namespace kernelserve::cpu {

// One mean pooling backward call.
struct MeanPoolingBwdArgs : PoolingRowsArgs {
  const void* dout = nullptr;  // [num_sequences, hidden], row-major
  void* dx = nullptr;          // [total_rows, hidden], written in full
};

// dx[row, h] = dout[n, h] / count_n for every counted row of sequence n, where count_n is the
// sequence's counted rows: the quotient in float (correctly rounded, as a float64 quotient
// rounded to float is), then rounded to `dtype`; rows no sequence counts get 0. Every element
// depends on its row alone, so the result is the same for every config.
// config.block_size: rows per work item (0 = 64). config "threads": worker threads (0 =
// hardware threads). InvalidArgument for inconsistent sizes, out-of-range cu_seqlens, or a
// config outside CheckMeanPoolingBwdCpuConfig.
absl::Status MeanPoolingBwdCpu(const MeanPoolingBwdArgs& args, const KernelConfig& config);

// OK when `config` can drive MeanPoolingBwdCpu: platform "" or "cpu", block_size in
// 0..kMaxCpuBlockRows (mean_pooling.h), threads in 0..kMaxCpuThreads, the others 0.
// InvalidArgument naming the field and range otherwise.
absl::Status CheckMeanPoolingBwdCpuConfig(const KernelConfig& config);
// The cpu platform's config schema: the fields above and "threads" (worker threads).
const ConfigSchema& MeanPoolingBwdCpuConfigSchema();

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_
