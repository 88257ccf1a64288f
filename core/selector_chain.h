// ConfigSelectorChain: picks the config of one call, tier by tier.
#ifndef KERNELSERVE_CORE_SELECTOR_CHAIN_H_
#define KERNELSERVE_CORE_SELECTOR_CHAIN_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/config_source.h"
#include "core/device.h"
#include "core/invocation.h"
#include "core/kernel.h"
#include "core/policy.h"
#include "core/store/config_cache.h"
#include "core/store/persistent_store.h"
#include "core/tuner.h"

namespace kernelserve {

// Options of the chain. Every field has a default.
struct ChainOptions {
  // Called for each failed store operation ("get", "put", "delete", "lease") with the store's
  // name; the chain goes on without that tier. Must be thread-safe. Empty = not reported.
  std::function<void(std::string_view store, std::string_view op)> on_store_error;
  // How long a cluster-wide tuning lease lasts if its holder dies before releasing it.
  absl::Duration lease_ttl = absl::Seconds(120);
  // Written into stored configs ("host"); empty = this machine's host name.
  std::string host;
};

// One selection to make. The pointers are borrowed for the duration of the call.
struct SelectRequest {
  const Kernel* kernel = nullptr;               // REQUIRES: non-null
  const PlatformImpl* impl = nullptr;           // REQUIRES: non-null; the platform that runs it
  const Problem* problem = nullptr;             // REQUIRES: non-null; the kernel's analysis
  const Invocation* invocation = nullptr;       // REQUIRES: non-null
  const std::string* cache_key = nullptr;       // REQUIRES: non-null; invocation->CacheKey()
  const DeviceInfo* device = nullptr;           // REQUIRES: non-null; the device that will run it
  std::optional<KernelConfig> override_config;  // the explicit override tier
  AutotunePolicy policy;
  // Times candidates on this call's inputs. Called at most once, only when the chain decides
  // to tune. Empty = this call cannot tune.
  std::function<absl::StatusOr<TuneReport>(const KernelConfig& heuristic,
                                           const std::vector<KernelConfig>& candidates)>
      tune;
  // Called before this call waits for another call that is tuning the same key; what it
  // returns is held while the call waits, and should let that call have the device to itself
  // meanwhile (ExecutorOptions::hold_device would otherwise wait for this call forever).
  // Empty (or a null hold) = nothing.
  std::function<std::unique_ptr<DeviceHold>()> step_aside;
};

// The chain's answer. A value type.
struct Selection {
  KernelConfig config;
  ConfigSource source = ConfigSource::kHeuristic;
  std::string cache_key;
  std::optional<TuneReport> tune_report;  // set when this selection tuned
  std::vector<std::string> warnings;      // e.g. every candidate failed
};

// Tiers, in order: explicit override -> scoped overlay (ScopedConfigOverlay) -> in-memory
// cache -> persistent store -> autotune (when the policy allows) -> heuristic. A config that
// a lower tier answers is written back to the tiers above it (memory; the store when the
// policy persists). Errors are never cached. Stored configs that lie outside the kernel's
// candidate space are misses. Concurrent misses on one key tune once (single flight); across
// processes, a lease in the store lets one of them tune while the others use the heuristic.
//
// Thread safety: thread-safe.
class ConfigSelectorChain {
 public:
  // Borrows `memory` (required) and `store` (null = no persistent tier); both must outlive
  // the chain.
  ConfigSelectorChain(ConfigCache* memory, PersistentStore* store, ChainOptions options = {});
  ConfigSelectorChain(const ConfigSelectorChain&) = delete;
  ConfigSelectorChain& operator=(const ConfigSelectorChain&) = delete;

  // Picks a config. InvalidArgument when the override does not run on these inputs;
  // FailedPrecondition when nothing is cached and the policy allows neither tuning nor the
  // heuristic.
  absl::StatusOr<Selection> Select(const SelectRequest& request);
  // Tunes now, whatever the caches hold, and writes the winner back (memory; the store when
  // the policy persists). A winner of a tuning that the time budget cut short (its report's
  // budget_reached) is the best of some candidates only: it goes to memory, never to the
  // store, and the selection warns so. REQUIRES: request.tune is set.
  absl::StatusOr<Selection> Tune(const SelectRequest& request);

  // Pins `config` for the request's key in memory and in the store. InvalidArgument when the
  // platform implementation cannot run it for this problem (request.tune is not used).
  absl::Status Pin(const SelectRequest& request, const KernelConfig& config);
  // Removes the config of `cache_key` for the device `fingerprint_hash` from memory and the
  // store. NotFound, naming both, when neither held it (a memory entry for another device
  // stays).
  absl::Status Forget(const std::string& fingerprint_hash, const std::string& cache_key);

  ConfigCache* memory() const { return memory_; }
  PersistentStore* store() const { return store_; }

 private:
  struct Flight;

  absl::Status CheckSupported(const SelectRequest& request, const KernelConfig& config,
                              std::string_view what) const;
  std::optional<Selection> FromStore(const SelectRequest& request, const std::string& key,
                                     bool* stored_heuristic);
  absl::StatusOr<Selection> TuneOnce(const SelectRequest& request, const std::string& key,
                                     bool use_lease);
  absl::StatusOr<Selection> RunTuning(const SelectRequest& request, const std::string& key,
                                      bool use_lease);
  absl::StatusOr<Selection> Heuristic(const SelectRequest& request, const std::string& key,
                                      bool write_back);
  // `persist` = false: memory only, whatever the policy says.
  void WriteBack(const SelectRequest& request, const std::string& key, const KernelConfig& config,
                 std::string_view origin, double seconds, bool persist = true);
  void StoreError(std::string_view op, const absl::Status& status);

  ConfigCache* const memory_;
  PersistentStore* const store_;
  const ChainOptions options_;
  absl::Mutex flights_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Flight>> flights_ ABSL_GUARDED_BY(flights_mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_SELECTOR_CHAIN_H_
