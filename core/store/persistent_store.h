// PersistentStore: the tier of the selector chain that outlives the process (a local JSON file,
// or Redis shared by every replica).
#ifndef KERNELSERVE_CORE_STORE_PERSISTENT_STORE_H_
#define KERNELSERVE_CORE_STORE_PERSISTENT_STORE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/config_source.h"
#include "core/kernel_config.h"

namespace kernelserve {

// The value stored for one key. A value type.
struct StoredConfig {
  KernelConfig config;
  std::string kernel_id;          // "mean_pooling@v1"
  std::string fingerprint_hash;   // DeviceFingerprint::Hash() of the device it was tuned on
  std::string cache_key;          // Invocation::CacheKey()
  double measured_seconds = 0.0;  // median time when tuned; 0 when pinned or heuristic
  std::string origin;             // "autotune", "heuristic" or "pinned" (by hand)
  std::string host;               // host name of the process that stored it
  int64_t stored_at_unix_ms = 0;  // when it was stored

  // {"schema":1,"config":{..},"kernel":..,"origin":..,...}
  std::string ToJson() const;
  // InvalidArgument when malformed or of another schema version; NotFound when its config is of
  // another config schema (kKernelConfigSchemaVersion): stores read that as a miss.
  static absl::StatusOr<StoredConfig> FromJson(std::string_view json);
};

// Thread safety: implementations are thread-safe.
class PersistentStore {
 public:
  virtual ~PersistentStore() = default;

  // "file" or "redis" (metrics label).
  virtual std::string_view name() const = 0;
  // The source reported when this store answers (kFile or kRedis).
  virtual ConfigSource source() const = 0;
  // Where it lives ("/home/u/.cache/kernelserve/configs.json", "redis://host:6379/0").
  virtual std::string location() const = 0;

  // NotFound when absent or stored under another config schema (kKernelConfigSchemaVersion);
  // Unavailable when the store cannot be reached; DataLoss when the stored value does not
  // decode.
  virtual absl::StatusOr<StoredConfig> Get(const std::string& fingerprint_hash,
                                           const std::string& cache_key) = 0;
  // Inserts or replaces. Unavailable when the store cannot be reached.
  virtual absl::Status Put(const StoredConfig& value) = 0;
  // NotFound when absent.
  virtual absl::Status Delete(const std::string& fingerprint_hash,
                              const std::string& cache_key) = 0;
  // Every entry whose kernel id starts with `kernel_prefix` ("" = all). Entries that do not
  // decode are left out.
  virtual absl::StatusOr<std::vector<StoredConfig>> List(std::string_view kernel_prefix) = 0;
  // Makes earlier writes durable.
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // Cluster-wide tuning lease on one key: true when this process may tune it now. The lease is
  // held until ReleaseLease or until `ttl` passes (so a process that dies frees it). Stores
  // not shared between processes always grant it.
  virtual absl::StatusOr<bool> TryAcquireLease(const std::string& /*fingerprint_hash*/,
                                               const std::string& /*cache_key*/,
                                               absl::Duration /*ttl*/) {
    return true;
  }
  virtual absl::Status ReleaseLease(const std::string& /*fingerprint_hash*/,
                                    const std::string& /*cache_key*/) {
    return absl::OkStatus();
  }
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_PERSISTENT_STORE_H_
