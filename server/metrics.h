// Metrics: the Prometheus metrics of the server, and the HTTP endpoint that serves them.
#ifndef KERNELSERVE_SERVER_METRICS_H_
#define KERNELSERVE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metric_series.h"

namespace kernelserve::server {

// The label values a server knows at startup. A value type.
struct KnownSeries {
  std::vector<std::string> kernels;  // every registered kernel
  // (kernel, platform) pairs the server can run: each kernel's platforms that are present.
  std::vector<std::pair<std::string, std::string>> kernel_platforms;
  std::vector<std::string> devices;  // "cpu", "cuda:0", ...
  std::string store;                 // the persistent store's name ("file", "redis"); "" = none
  std::vector<std::string> config_sources;  // "override", "memory", ... "heuristic"
  std::vector<std::string> identities;      // labels of the identities known at startup
  std::string version, cuda, git;           // of the build
};

class MetricsEndpoint;  // the HTTP server of /metrics (metrics.cc)

// Thread safety: thread-safe (prometheus-cpp metrics are).
class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics on `address` ("127.0.0.1:9464"; port 0 picks a free one). Returns the port
  // it listens on. Unavailable when the address cannot be bound, naming --metrics-listen, the
  // address, why (in use, ...) and what to pass instead. With a `bearer_token`, a scrape
  // must carry "Authorization: Bearer <token>" (else 401).
  absl::StatusOr<int> Serve(const std::string& address, const std::string& bearer_token = "");

  // A finished request: code is the gRPC code name ("OK", "INVALID_ARGUMENT").
  void Request(std::string_view kernel, std::string_view platform, std::string_view code,
               double seconds);
  // A finished call of the Open Inference Protocol front door, by method ("ModelInfer",
  // "ServerLive", ...) and gRPC code name. Its kernel calls count in Request too.
  void InferenceProtocolCall(std::string_view method, std::string_view code);
  void KernelRun(std::string_view kernel, std::string_view platform, std::string_view device,
                 double seconds);
  void ConfigSelection(std::string_view kernel, std::string_view source);
  // A finished kernel call of an identity (its bounded label, Tenant::label()), by gRPC code.
  void IdentityRequest(std::string_view identity, std::string_view code);
  // A call refused by an identity's quota: "rate", "inflight_bytes", "regions" or
  // "shared_memory_bytes" (shared-memory registrations).
  void QuotaRefusal(std::string_view identity, std::string_view quota);
  // outcome: "ok", "all_failed" or "error".
  void AutotuneRun(std::string_view kernel, std::string_view outcome, double seconds);
  void QueueDepth(std::string_view device, int depth);
  // Requests in flight: +1 when one is accepted, -1 when it is answered.
  void InflightRequestsAdd(int64_t delta);
  void StoreError(std::string_view store, std::string_view op);
  void DeviceMemory(std::string_view device, int64_t used_bytes, int64_t total_bytes);
  // The page-locked host pool: bytes held by buffers and cached for reuse, and since the last
  // call how many blocks it allocated anew and how many requests it refused (limit reached).
  void PinnedHost(int64_t in_use_bytes, int64_t cached_bytes, int64_t new_allocations,
                  int64_t new_refusals);
  void Received(int64_t bytes);
  void Sent(int64_t bytes);
  // Time a request waited in `device`'s queue before its work started (or was dropped).
  void QueueWait(std::string_view device, double seconds);
  // Resident tensors held on `device` now: bytes and how many.
  void Resident(std::string_view device, int64_t bytes, int tensors);
  // Resident tensors created, expired (after their ttl idle), and creates refused by `cap`
  // ("max_bytes", "quota_bytes", "max_tensors", "gpu_room", "out_of_memory").
  void ResidentCreated();
  void ResidentExpired(int tensors);
  void ResidentRefused(std::string_view cap);

  // Creates, at 0, the series that dashboards and alerts rate() over, for every label value the
  // server knows at startup, so that the first increments are not lost to a series appearing
  // mid-window; and sets kernelserve_build_info{version,cuda,git} to 1.
  void ExportKnownSeries(const KnownSeries& known);

  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Counter>& kserve_calls_;
  prometheus::Family<prometheus::Histogram>& kernel_duration_;
  prometheus::Family<prometheus::Counter>& selections_;
  prometheus::Family<prometheus::Counter>& identity_requests_;
  prometheus::Family<prometheus::Counter>& quota_refusals_;
  prometheus::Family<prometheus::Counter>& autotune_runs_;
  prometheus::Histogram& autotune_duration_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Gauge& inflight_;
  prometheus::Family<prometheus::Counter>& store_errors_;
  prometheus::Family<prometheus::Gauge>& memory_used_;
  prometheus::Family<prometheus::Gauge>& memory_total_;
  prometheus::Family<prometheus::Gauge>& pinned_bytes_;
  prometheus::Counter& pinned_allocations_;
  prometheus::Counter& pinned_refusals_;
  prometheus::Counter& received_;
  prometheus::Counter& sent_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& resident_bytes_;
  prometheus::Family<prometheus::Gauge>& resident_tensors_;
  prometheus::Counter& resident_created_;
  prometheus::Counter& resident_expired_;
  prometheus::Family<prometheus::Counter>& resident_refusals_;
  // The series updated on every call, found without building label maps (declared after the
  // families they refer to).
  SeriesCache<prometheus::Counter, 3> request_series_{requests_, {"kernel", "platform", "code"}};
  SeriesCache<prometheus::Histogram, 1> request_duration_series_{request_duration_, {"kernel"}};
  SeriesCache<prometheus::Counter, 2> kserve_call_series_{kserve_calls_, {"method", "code"}};
  SeriesCache<prometheus::Histogram, 3> kernel_duration_series_{kernel_duration_,
                                                                {"kernel", "platform", "device"}};
  SeriesCache<prometheus::Counter, 2> selection_series_{selections_, {"kernel", "source"}};
  SeriesCache<prometheus::Counter, 2> identity_series_{identity_requests_, {"identity", "code"}};
  SeriesCache<prometheus::Gauge, 1> queue_depth_series_{queue_depth_, {"device"}};
  SeriesCache<prometheus::Histogram, 1> queue_wait_series_{queue_wait_, {"device"}};
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_METRICS_H_
