#include "core/selector_chain.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"

namespace kernelserve {

struct ConfigSelectorChain::Flight {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<Selection> result ABSL_GUARDED_BY(mu) = absl::UnknownError("in flight");
};

namespace {

std::string ThisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Selection Make(KernelConfig config, ConfigSource source, const std::string& key) {
  Selection s;
  s.config = std::move(config);
  s.source = source;
  s.cache_key = key;
  return s;
}

absl::Status NothingToForget(const std::string& fingerprint_hash, const std::string& cache_key,
                             const std::string& where) {
  return absl::NotFoundError(absl::StrCat("no config for cache key '", cache_key, "' on device '",
                                          fingerprint_hash, "' in ", where));
}

// The distinct values `field` takes in `configs`, quoted, "" shown as (none).
std::string ValuesOf(const std::vector<KernelConfig>& configs, std::string KernelConfig::*field) {
  std::vector<std::string> values;
  for (const KernelConfig& c : configs) {
    std::string value = c.*field;
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
  }
  std::string out;
  for (const std::string& value : values) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", value.empty() ? "(none)" : "'" + value + "'");
  }
  return out;
}

// OK when the algorithm of `config` is empty or names a variant that some candidate of the
// platform has; InvalidArgument naming the variants there are otherwise, so that no text of a
// client's choosing is cached or stored.
absl::Status CheckVariants(const KernelConfig& config,
                           const std::vector<KernelConfig>& candidates) {
  const std::string& value = config.algorithm;
  if (value.empty()) return absl::OkStatus();
  const bool known = std::any_of(candidates.begin(), candidates.end(),
                                 [&](const KernelConfig& c) { return c.algorithm == value; });
  if (known) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "algorithm '", value.substr(0, 64), value.size() > 64 ? "..." : "",
      "' is not one of this platform's: ", ValuesOf(candidates, &KernelConfig::algorithm)));
}

}  // namespace

ConfigSelectorChain::ConfigSelectorChain(ConfigCache* memory, PersistentStore* store,
                                         ChainOptions options)
    : memory_(memory), store_(store), options_(std::move(options)) {}

void ConfigSelectorChain::StoreError(std::string_view op, const absl::Status& status) {
  (void)status;
  if (options_.on_store_error && store_ != nullptr) options_.on_store_error(store_->name(), op);
}

absl::Status ConfigSelectorChain::CheckSupported(const SelectRequest& request,
                                                 const KernelConfig& config,
                                                 std::string_view what) const {
  const std::string& platform = request.invocation->platform;
  if (!request.impl->RunsConfigsOf(config.platform)) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), " config is for platform '",
                                                   config.platform, "' but the call runs on '",
                                                   platform, "'"));
  }
  absl::Status checked = request.impl->CheckConfig(config, *request.problem, *request.device);
  if (checked.ok() && !config.algorithm.empty()) {
    checked = CheckVariants(config, request.impl->Candidates(*request.problem, *request.device));
  }
  if (!checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), " config {", config.DebugString(),
                                                   "} cannot run ", request.kernel->id(), " on ",
                                                   platform, ": ", checked.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Selection> ConfigSelectorChain::Select(const SelectRequest& request) {
  const std::string& key = *request.cache_key;
  if (request.override_config) {
    KS_RETURN_IF_ERROR(CheckSupported(request, *request.override_config, "override"));
    return Make(*request.override_config, ConfigSource::kOverride, key);
  }
  if (std::optional<KernelConfig> c =
          ScopedConfigOverlay::Lookup(key, request.kernel->id(), request.kernel->name())) {
    KS_RETURN_IF_ERROR(CheckSupported(request, *c, "overlay"));
    return Make(*c, ConfigSource::kOverlay, key);
  }
  if (std::optional<KernelConfig> c = memory_->Get(key)) {
    return Make(*c, ConfigSource::kMemory, key);
  }
  const bool tune = request.policy.ShouldAutotune() && request.tune;
  bool stored_heuristic = false;
  if (std::optional<Selection> s = FromStore(request, key, &stored_heuristic)) {
    // A stored heuristic answer does not stop tuning when tuning is allowed now.
    if (!(stored_heuristic && tune)) {
      memory_->Put(key, s->config, request.invocation->device.Hash());
      return *std::move(s);
    }
  }
  if (tune) return TuneOnce(request, key, /*use_lease=*/true);
  return Heuristic(request, key, /*write_back=*/!request.policy.ShouldAutotune());
}

absl::StatusOr<Selection> ConfigSelectorChain::Tune(const SelectRequest& request) {
  if (!request.tune) return absl::InvalidArgumentError("this call cannot be tuned");
  return TuneOnce(request, *request.cache_key, /*use_lease=*/false);
}

std::optional<Selection> ConfigSelectorChain::FromStore(const SelectRequest& request,
                                                        const std::string& key,
                                                        bool* stored_heuristic) {
  if (store_ == nullptr) return std::nullopt;
  absl::StatusOr<StoredConfig> stored = store_->Get(request.invocation->device.Hash(), key);
  if (!stored.ok()) {
    if (!absl::IsNotFound(stored.status())) StoreError("get", stored.status());
    return std::nullopt;
  }
  // Outside the candidate space (another build, a hand edit): a miss, never a crash.
  if (!request.impl->IsCandidate(stored->config, *request.problem, *request.device)) {
    return std::nullopt;
  }
  *stored_heuristic = stored->origin == "heuristic";
  return Make(stored->config, store_->source(), key);
}

absl::StatusOr<Selection> ConfigSelectorChain::TuneOnce(const SelectRequest& request,
                                                        const std::string& key, bool use_lease) {
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    absl::MutexLock lock(&flights_mu_);
    auto [it, inserted] = flights_.try_emplace(key, nullptr);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (!leader) {
    absl::StatusOr<Selection> result = absl::UnknownError("not done");
    {
      // Declared before the lock, so released after it: the leader may need the device.
      const std::unique_ptr<DeviceHold> aside = request.step_aside ? request.step_aside() : nullptr;
      absl::MutexLock lock(&flight->mu);
      flight->mu.Await(absl::Condition(&flight->done));
      result = flight->result;
    }
    if (absl::IsDeadlineExceeded(result.status()) || absl::IsCancelled(result.status())) {
      // The leader's caller went away mid-tuning; that is not this call's error.
      return Heuristic(request, key, /*write_back=*/false);
    }
    if (result.ok()) result->tune_report.reset();  // the report belongs to the leader's call
    return result;
  }
  absl::StatusOr<Selection> result = RunTuning(request, key, use_lease);
  {
    absl::MutexLock lock(&flights_mu_);
    flights_.erase(key);
  }
  absl::MutexLock lock(&flight->mu);
  flight->result = result;
  flight->done = true;
  return result;
}

absl::StatusOr<Selection> ConfigSelectorChain::RunTuning(const SelectRequest& request,
                                                         const std::string& key, bool use_lease) {
  const std::string fp = request.invocation->device.Hash();
  bool leased = false;
  if (use_lease && store_ != nullptr) {
    absl::StatusOr<bool> granted = store_->TryAcquireLease(fp, key, options_.lease_ttl);
    if (!granted.ok()) {
      StoreError("lease", granted.status());  // cannot coordinate: tune here anyway
    } else if (!*granted) {
      // Another replica is tuning this key: answer with the heuristic, cache nothing, and
      // pick up its result from the store on a later call.
      return Heuristic(request, key, /*write_back=*/false);
    } else {
      leased = true;
    }
  }
  const KernelConfig heuristic = request.impl->Heuristic(*request.problem, *request.device);
  const std::vector<KernelConfig> candidates =
      request.impl->Candidates(*request.problem, *request.device);
  absl::StatusOr<TuneReport> report = request.tune(heuristic, candidates);
  if (leased) {
    absl::Status released = store_->ReleaseLease(fp, key);
    if (!released.ok()) StoreError("lease", released);
  }
  if (!report.ok()) return report.status();
  Selection s = Make(report->best, ConfigSource::kAutotune, key);
  if (report->all_failed) {
    s.source = ConfigSource::kHeuristic;
    s.warnings.push_back(absl::StrCat(report->budget_reached && report->candidates_run == 0
                                          ? "the tuning time budget ran out before any candidate"
                                          : "every autotune candidate failed",
                                      " for ", key, "; using the heuristic config"));
  } else if (report->budget_reached) {
    // The best of the candidates timed, not of all: kept in memory (so that calls do not tune
    // it again at once), never stored as if it were a full tuning's.
    WriteBack(request, key, report->best, "autotune", report->best_seconds, /*persist=*/false);
    s.warnings.push_back(absl::StrCat(
        "the tuning time budget ran out after ", report->candidates_run, " of ",
        report->candidates.size(),
        " candidates: the best of those is kept in memory, not written to the config store"));
  } else {
    WriteBack(request, key, report->best, "autotune", report->best_seconds);
  }
  s.tune_report = *std::move(report);
  return s;
}

absl::StatusOr<Selection> ConfigSelectorChain::Heuristic(const SelectRequest& request,
                                                         const std::string& key, bool write_back) {
  if (!request.policy.allow_heuristics) {
    return absl::FailedPreconditionError(
        absl::StrCat("no cached config for ", key,
                     " and the policy allows neither autotuning this call nor the heuristic"));
  }
  KernelConfig config = request.impl->Heuristic(*request.problem, *request.device);
  if (write_back) WriteBack(request, key, config, "heuristic", 0.0);
  return Make(std::move(config), ConfigSource::kHeuristic, key);
}

void ConfigSelectorChain::WriteBack(const SelectRequest& request, const std::string& key,
                                    const KernelConfig& config, std::string_view origin,
                                    double seconds, bool persist) {
  memory_->Put(key, config, request.invocation->device.Hash());
  if (store_ == nullptr || !request.policy.persist || !persist) return;
  StoredConfig value;
  value.config = config;
  value.kernel_id = request.invocation->kernel_id;
  value.fingerprint_hash = request.invocation->device.Hash();
  value.cache_key = key;
  value.measured_seconds = seconds;
  value.origin = std::string(origin);
  value.host = options_.host.empty() ? ThisHost() : options_.host;
  value.stored_at_unix_ms = NowUnixMs();
  absl::Status put = store_->Put(value);
  if (!put.ok()) StoreError("put", put);
}

absl::Status ConfigSelectorChain::Pin(const SelectRequest& request, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckSupported(request, config, "pinned"));
  const std::string& key = *request.cache_key;
  memory_->Put(key, config, request.invocation->device.Hash());
  if (store_ == nullptr) return absl::OkStatus();
  StoredConfig value;
  value.config = config;
  value.kernel_id = request.invocation->kernel_id;
  value.fingerprint_hash = request.invocation->device.Hash();
  value.cache_key = key;
  value.origin = "pinned";
  value.host = options_.host.empty() ? ThisHost() : options_.host;
  value.stored_at_unix_ms = NowUnixMs();
  absl::Status put = store_->Put(value);
  if (!put.ok()) StoreError("put", put);
  return put;
}

absl::Status ConfigSelectorChain::Forget(const std::string& fingerprint_hash,
                                         const std::string& cache_key) {
  const bool in_memory = memory_->EraseFor(cache_key, fingerprint_hash);
  if (store_ == nullptr) {
    return in_memory ? absl::OkStatus() : NothingToForget(fingerprint_hash, cache_key, "memory");
  }
  absl::Status deleted = store_->Delete(fingerprint_hash, cache_key);
  if (deleted.ok() || (absl::IsNotFound(deleted) && in_memory)) return absl::OkStatus();
  if (!absl::IsNotFound(deleted)) {
    StoreError("delete", deleted);
    return deleted;
  }
  return NothingToForget(fingerprint_hash, cache_key,
                         absl::StrCat("memory and the ", Sv(store_->name()), " store"));
}

}  // namespace kernelserve
