// KernelConfig: the tunable launch parameters of one kernel call.
#ifndef KERNELSERVE_CORE_KERNEL_CONFIG_H_
#define KERNELSERVE_CORE_KERNEL_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kernelserve {

// The version written into every serialised config; a stored config of another version is a
// cache miss.
inline constexpr int kKernelConfigSchemaVersion = 1;

// A value type. Fields a kernel does not use stay 0 or empty.
struct KernelConfig {
  int block_q = 0;     // query rows per tile (attention)
  int block_k = 0;     // key rows per tile (attention)
  int block_d = 0;     // head-dim slice per tile (0 = whole head)
  int num_warps = 0;   // warps per block (GPU) or worker threads (CPU); 0 = kernel default
  int num_stages = 0;  // pipeline depth of the copies
  int block_size = 0;  // rows per chunk (pooling)
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

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_KERNEL_CONFIG_H_
