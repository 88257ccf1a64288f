// The CPU platform of the example kernel rms_norm (example_kernel.h): the reference as a free
// function over raw buffers (RmsNormCpu), its config checks, and the platform that runs it
// (MakeRmsNormCpu), a cpu::CpuImpl.
#ifndef KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_CPU_H_
#define KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_CPU_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "core/config_schema.h"
#include "core/dtype.h"
#include "core/kernel.h"
#include "core/kernel_config.h"

namespace kernelserve::testing {

// One rms_norm call. Pointers are borrowed; the caller keeps them alive for the call.
struct RmsNormArgs {
  DType dtype = DType::kF32;     // of x, weight and out: kF32, kF16 or kBF16
  int64_t rows = 0;              // rows of x
  int64_t hidden = 0;            // H
  const void* x = nullptr;       // [rows, hidden], row-major
  const void* weight = nullptr;  // [hidden], or null for ones
  void* out = nullptr;           // [rows, hidden], written in full
  double eps = 1e-6;             // added to the mean square (> 0)
  // Checked between work items when not null; its first non-OK status stops the call, which
  // then returns it (out is left partly written).
  const std::function<absl::Status()>* interrupt = nullptr;
};

// out[r, h] = x[r, h] * (1 / sqrt(ss_r / hidden + eps)) * weight[h], ss_r the sum of the
// squares of row r in float in column order; every step in float, rounded once to `dtype`.
// Rows are independent: every config gives the same bits.
// config.block_size: rows per work item (0 = 16). config "threads": worker threads (0 = one
// per hardware thread). InvalidArgument for negative sizes, a dtype that is not floating, eps
// <= 0, or a config that CheckRmsNormCpuConfig refuses.
absl::Status RmsNormCpu(const RmsNormArgs& args, const KernelConfig& config);

// The largest block_size a config may ask for.
inline constexpr int kMaxRmsNormBlockRows = 1 << 20;
// OK when `config` can drive RmsNormCpu: platform "" or "cpu", block_size in
// 0..kMaxRmsNormBlockRows, threads in 0..kMaxCpuThreads, the other fields 0.
// InvalidArgument naming the field and range otherwise.
absl::Status CheckRmsNormCpuConfig(const KernelConfig& config);
// The cpu platform's config schema: the fields above and "threads" (worker threads).
const ConfigSchema& RmsNormCpuConfigSchema();

// The cpu platform of rms_norm. Configs: block_size (rows per work item) and threads
// (threads). Heuristic: 16 rows per item; one thread below 2^18 elements of x, else every
// hardware thread. Candidates: block_size in {16, 64, 256} x threads in {1, 2, hardware
// threads}. Runs every problem of the contract.
// Thread safety: stateless; every method may run on many threads at once.
std::unique_ptr<PlatformImpl> MakeRmsNormCpu();

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_EXAMPLE_KERNEL_CPU_H_
