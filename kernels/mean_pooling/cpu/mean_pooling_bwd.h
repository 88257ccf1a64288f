// The CPU mean pooling backward kernel as a free function over raw buffers.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/kernel_config.h"

namespace kernelserve::cpu {

// One mean pooling backward call. Pointers are borrowed; the caller keeps them alive.
struct MeanPoolingBwdArgs {
  DType dtype = DType::kF32;   // of dout and dx: kF32, kF16 or kBF16
  const void* dout = nullptr;  // [num_sequences, hidden], row-major
  void* dx = nullptr;          // [total_rows, hidden], written in full
  int64_t total_rows = 0;      // rows of x (and dx)
  int64_t hidden = 0;          // H
  int64_t num_sequences = 0;   // B (dense, masked) or N (varlen)
  // Dense and masked: sequence b is rows [b * seq_len, (b + 1) * seq_len). Ignored in varlen.
  int64_t seq_len = 0;
  // Varlen when not null: sequence n is rows [cu_seqlens[n], cu_seqlens[n + 1]);
  // num_sequences + 1 entries, starting at 0, never decreasing, ending at most at total_rows.
  const int64_t* cu_seqlens = nullptr;
  // Masked when not null: [num_sequences, seq_len], nonzero = the row counts. Dense only.
  const uint8_t* mask = nullptr;
  // Checked between work items when not null; its first non-OK status stops the call, which
  // then returns it (dx is left partly written).
  const std::function<absl::Status()>* interrupt = nullptr;
};

// dx[row, h] = dout[n, h] / count_n for every counted row of sequence n, where count_n is the
// sequence's counted rows: the quotient in float (correctly rounded, as a float64 quotient
// rounded to float is), then rounded to `dtype`; rows no sequence counts get 0. Every element
// depends on its row alone, so the result is the same for every config.
// config.block_size: rows per work item (0 = 64). config.num_warps: worker threads (0 =
// hardware threads). InvalidArgument for inconsistent sizes, out-of-range cu_seqlens, or a
// config outside CheckMeanPoolingBwdCpuConfig.
absl::Status MeanPoolingBwdCpu(const MeanPoolingBwdArgs& args, const KernelConfig& config);

// OK when `config` can drive MeanPoolingBwdCpu: platform "" or "cpu", block_size in
// 0..kMaxCpuBlockRows (mean_pooling.h), num_warps in 0..kMaxCpuThreads, the others 0.
// InvalidArgument naming the field and range otherwise.
absl::Status CheckMeanPoolingBwdCpuConfig(const KernelConfig& config);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CPU_MEAN_POOLING_BWD_H_
