// Metrics: the Prometheus metrics of the server, and the HTTP endpoint that serves them.
#ifndef KERNELSERVE_SERVER_METRICS_H_
#define KERNELSERVE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kernelserve::server {

// Thread safety: thread-safe (prometheus-cpp metrics are).
class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics on `address` ("127.0.0.1:9464"; port 0 picks a free one). Returns the port
  // it listens on. Unavailable when the address cannot be bound.
  absl::StatusOr<int> Serve(const std::string& address);

  // A finished request: code is the gRPC code name ("OK", "INVALID_ARGUMENT").
  void Request(std::string_view kernel, std::string_view platform, std::string_view code,
               double seconds);
  void KernelRun(std::string_view kernel, std::string_view platform, std::string_view device,
                 double seconds);
  void ConfigSelection(std::string_view kernel, std::string_view source);
  // outcome: "ok", "all_failed" or "error".
  void AutotuneRun(std::string_view kernel, std::string_view outcome, double seconds);
  void QueueDepth(std::string_view device, int depth);
  // Requests in flight: +1 when one is accepted, -1 when it is answered.
  void InflightRequestsAdd(int64_t delta);
  void StoreError(std::string_view store, std::string_view op);
  void DeviceMemory(std::string_view device, int64_t used_bytes, int64_t total_bytes);
  void Received(int64_t bytes);
  void Sent(int64_t bytes);

  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& kernel_duration_;
  prometheus::Family<prometheus::Counter>& selections_;
  prometheus::Family<prometheus::Counter>& autotune_runs_;
  prometheus::Histogram& autotune_duration_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Gauge& inflight_;
  prometheus::Family<prometheus::Counter>& store_errors_;
  prometheus::Family<prometheus::Gauge>& memory_used_;
  prometheus::Family<prometheus::Gauge>& memory_total_;
  prometheus::Counter& received_;
  prometheus::Counter& sent_;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_METRICS_H_
