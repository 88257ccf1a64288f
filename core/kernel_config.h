// KernelConfig: the tunable launch parameters of one kernel call.
#ifndef KERNELSERVE_CORE_KERNEL_CONFIG_H_
#define KERNELSERVE_CORE_KERNEL_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kernelserve {

// The version written into every serialised config; a stored config of another version is a
// cache miss. 2: named fields ("fields"), no "backend"; the fixed fields mean one thing each.
inline constexpr int kKernelConfigSchemaVersion = 2;

// A value type. Which fields a platform uses, and their ranges, its ConfigSchema
// (core/config_schema.h) declares; the others stay 0 or empty.
struct KernelConfig {
  // The fixed fields: each means one thing on every platform that uses it.
  int block_q = 0;        // query rows per tile (attention)
  int block_k = 0;        // key rows per tile (attention)
  int block_d = 0;        // head-dim slice per tile (attention; 0 = whole head)
  int num_warps = 0;      // GPU warps per block
  int num_stages = 0;     // pipeline depth of the copies
  int block_size = 0;     // rows per chunk (pooling)
  std::string platform;   // "cpu", "cuda", "cudnn"; "" = whatever runs the call
  std::string algorithm;  // a named kernel variant ("" = the default one, "wgmma")
  int priority = 0;       // tie-break among equal-time candidates; higher wins
  // The named fields of the platform's config schema ("threads", "lanes", "plan"); a field
  // left out is 0. Sorted, so that equal configs compare and serialise equal.
  std::map<std::string, int64_t, std::less<>> named;

  bool operator==(const KernelConfig& other) const = default;

  // The named field `name`, 0 when not set.
  int64_t Named(std::string_view name) const;

  // {"schema":2,"block_q":..,...,"fields":{"threads":4}} with keys sorted ("fields" only when
  // a named field is set).
  std::string ToJson() const;
  // Inverse of ToJson. InvalidArgument when the text is not JSON or a field has the wrong
  // type; FailedPrecondition when "schema" is not kKernelConfigSchemaVersion (a config written
  // by another version: stores read it as a miss). Unknown keys are ignored.
  static absl::StatusOr<KernelConfig> FromJson(std::string_view json);
  // "block_q=64 block_k=64 num_warps=4 platform=cuda threads=2" (zero and empty fields left
  // out; named fields after the fixed ones).
  std::string DebugString() const;
};

// One fixed int field of KernelConfig, by name.
struct FixedIntField {
  const char* name;           // "block_q"
  int KernelConfig::*member;  // &KernelConfig::block_q
};
// The fixed int fields a platform's schema may declare (all but priority), in declaration
// order.
absl::Span<const FixedIntField> FixedIntFields();
// True when `name` is a fixed field a schema may declare: one of FixedIntFields() or
// "algorithm". (platform and priority are every platform's and never declared.)
bool IsFixedConfigField(std::string_view name);

// Why `config` is none of `allowed` (for error messages): the first field whose value no
// allowed config has, with the values they have ("block_q=7: expected one of 64, 128"), or,
// when each value occurs but not together, the allowed configs (at most a dozen listed).
std::string ExplainNotAmong(const KernelConfig& config, absl::Span<const KernelConfig> allowed);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_KERNEL_CONFIG_H_
