// KernelConfig: the tunable launch parameters of one kernel call.
#ifndef KERNELSERVE_CORE_KERNEL_CONFIG_H_
#define KERNELSERVE_CORE_KERNEL_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kernelserve {

// The version written into every serialised config; a stored config of another version is a
// cache miss.
inline constexpr int kKernelConfigSchemaVersion = 1;

// A value type. Fields a kernel does not use stay 0 or empty.
struct KernelConfig {
  int block_q = 0;        // query rows per tile (attention)
  int block_k = 0;        // key rows per tile (attention)
  int block_d = 0;        // head-dim slice per tile (0 = whole head)
  int num_warps = 0;      // warps per block (GPU) or worker threads (CPU); 0 = kernel default
  int num_stages = 0;     // pipeline depth of the copies
  int block_size = 0;     // rows per chunk (pooling)
  std::string platform;   // "cpu", "cuda", "cudnn"; "" = whatever runs the call
  std::string backend;    // free-form backend detail ("", "wmma", ...)
  std::string algorithm;  // free-form variant name ("", "split", ...)
  int priority = 0;       // tie-break among equal-time candidates; higher wins

  bool operator==(const KernelConfig& other) const = default;

  // {"schema":1,"block_q":..,...} with keys sorted.
  std::string ToJson() const;
  // Inverse of ToJson. InvalidArgument when the text is not JSON, the schema differs, or a
  // field has the wrong type. Unknown keys are ignored.
  static absl::StatusOr<KernelConfig> FromJson(std::string_view json);
  // "block_q=64 block_k=64 num_warps=4 platform=cuda" (zero and empty fields left out).
  std::string DebugString() const;
};

// The values one int field of KernelConfig may take on a platform.
struct ConfigFieldRange {
  const char* name = "";               // "num_warps"
  int KernelConfig::*field = nullptr;  // &KernelConfig::num_warps
  int min = 0;                         // inclusive
  int max = 0;                         // inclusive
};

// Why `config` is none of `allowed` (for error messages): the first int field whose value no
// allowed config has, with the values they have ("block_q=7: expected one of 64, 128"), or,
// when each value occurs but not together, the allowed configs (at most a dozen listed).
std::string ExplainNotAmong(const KernelConfig& config, absl::Span<const KernelConfig> allowed);

// OK when every field listed in `ranges` lies in its range and every other int field but
// priority is 0. InvalidArgument otherwise, naming `what` (e.g. "mean_pooling on cpu"), the
// first offending field, its value and the allowed range. Configs are checked this way before
// anything is sized from them.
absl::Status CheckConfigFields(const KernelConfig& config, std::string_view what,
                               absl::Span<const ConfigFieldRange> ranges);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_KERNEL_CONFIG_H_
