// The CPU mean pooling kernel as a free function over raw buffers.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/dtype.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// Rows summed into one partial sum (a "leaf"). The sum of a sequence is, per column,
// ((0 + leaf_0) + leaf_1) + ..., each leaf the sum of its rows in sequence order starting
// from 0, all in float. Leaves start at row 0 of their sequence, so the order of additions
// depends on neither the chunk size nor the thread count: results are bitwise reproducible.
inline constexpr int64_t kMeanPoolingLeafRows = 16;

// The rows of a mean pooling call (forward or backward) and their sequences. Pointers are
// borrowed; the caller keeps them alive for the call.
struct PoolingRowsArgs {
  DType dtype = DType::kF32;  // of the call's data (x, out; dout, dx): kF32, kF16 or kBF16
  int64_t total_rows = 0;     // rows of x (and dx)
  int64_t hidden = 0;         // H
  int64_t num_sequences = 0;  // B (dense, masked) or N (varlen)
  // Dense and masked: sequence b is rows [b * seq_len, (b + 1) * seq_len). Ignored in varlen.
  int64_t seq_len = 0;
  // Varlen when not null: sequence n is rows [cu_seqlens[n], cu_seqlens[n + 1]);
  // num_sequences + 1 entries, starting at 0, never decreasing, ending at most at total_rows.
  const int64_t* cu_seqlens = nullptr;
  // Masked when not null: [num_sequences, seq_len], nonzero = the row counts. Dense only.
  const uint8_t* mask = nullptr;
  // Checked between work items when not null; its first non-OK status stops the call, which
  // then returns it (its output is left partly written).
  const std::function<absl::Status()>* interrupt = nullptr;
};

// The counted rows of each sequence: all its rows, or with a mask those whose mask is nonzero.
// REQUIRES: `args` consistent (cu_seqlens valid; a mask of num_sequences * seq_len entries).
std::vector<int64_t> CountPoolingRows(const PoolingRowsArgs& args);

// One mean pooling call.
struct MeanPoolingArgs : PoolingRowsArgs {
  const void* x = nullptr;  // [total_rows, hidden], row-major
  void* out = nullptr;      // [num_sequences, hidden], written in full
};

// out[n, h] = mean over the counted rows of sequence n of x[row, h], accumulated in float and
// rounded once to `dtype`; a sequence with no counted row gives 0.
// config.block_size: rows per work item, rounded up to whole leaves (0 = 32 rows).
// config "threads": worker threads (0 = hardware threads).
// InvalidArgument for inconsistent sizes, out-of-range cu_seqlens, a config with negative
// fields or a platform other than "" or "cpu".
absl::Status MeanPoolingCpu(const MeanPoolingArgs& args, const KernelConfig& config);

// The largest block_size a config may ask for (0 = chunk_size).
inline constexpr int kMaxCpuBlockRows = 1 << 20;
// OK when `config` can drive MeanPoolingCpu: platform "" or "cpu", block_size in
// 0..kMaxCpuBlockRows, threads in 0..kMaxCpuThreads, the other fields 0. InvalidArgument
// naming the field and range otherwise.
absl::Status CheckMeanPoolingCpuConfig(const KernelConfig& config);
// The cpu platform's config schema: the fields above and "threads" (worker threads).
const ConfigSchema& MeanPoolingCpuConfigSchema();

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_H_
