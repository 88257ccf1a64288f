#include "server/metrics.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "prometheus/text_serializer.h"
#include "server/listener.h"

namespace kernelserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Request and kernel latencies: 10 us .. 10 s. Made once: the per-call series pass it to
// SeriesCache::Get, which copies it only for a new series.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets =
      new Histogram::BucketBoundaries{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                      1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   0.5,  1.0,  2.5,    10.0};
  return *kBuckets;
}

// Tuning runs: 1 ms .. 5 min.
Histogram::BucketBoundaries TuningBuckets() {
  return {1e-3, 1e-2, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0};
}

std::string S(std::string_view v) { return std::string(v); }

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest Sha256(std::string_view text) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

// Unavailable naming --metrics-listen, `address` and why it cannot be listened on: what a bind
// of our own says (in use, not an address of this host, ...), else civetweb's `what`; and the
// flag's ways out.
absl::Status MetricsListenError(const std::string& address, std::string_view what) {
  const absl::StatusOr<std::unique_ptr<Listener>> probe = Listener::Bind(address, {});
  const std::string why = probe.status().code() == absl::StatusCode::kUnavailable
                              ? std::string(probe.status().message())
                              : absl::StrCat("cannot listen on this address: ", Sv(what));
  return absl::UnavailableError(
      absl::StrCat("--metrics-listen=", address, ": ", why,
                   "; give --metrics-listen another HOST:PORT (port 0 picks a free one), or "
                   "--metrics-listen=off to serve no metrics"));
}

}  // namespace

// GET /metrics: the registry in Prometheus's text format; with a token, only for a scrape that
// carries it (compared as digests, so in the same time wherever it differs).
class MetricsEndpoint final : public CivetHandler {
 public:
  MetricsEndpoint(std::shared_ptr<prometheus::Registry> registry, const std::string& token)
      : registry_(std::move(registry)),
        token_set_(!token.empty()),
        digest_(Sha256(absl::StrCat("Bearer ", token))) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* connection) override {
    if (token_set_ && !Authorized(mg_get_header(connection, "Authorization"))) {
      static constexpr char kDenied[] = "a bearer token is required (--metrics-auth-token-file)\n";
      mg_printf(connection,
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"kernelserve\"\r\n"
                "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
                sizeof(kDenied) - 1, kDenied);
      return true;
    }
    const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
    mg_printf(connection,
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
              "Content-Length: %zu\r\n\r\n",
              body.size());
    mg_write(connection, body.data(), body.size());
    return true;
  }

  // Starts the HTTP server on `address`; throws CivetException when it cannot.
  void Start(const std::string& address) {
    server_ = std::make_unique<CivetServer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", "2", "request_timeout_ms", "10000"});
    server_->addHandler("/metrics", this);
  }
  std::vector<int> ports() const { return server_->getListeningPorts(); }
  void Stop() {
    if (server_ != nullptr) server_->close();
  }

 private:
  bool Authorized(const char* header) const {
    if (header == nullptr) return false;
    const Digest got = Sha256(header);
    return CRYPTO_memcmp(got.data(), digest_.data(), got.size()) == 0;
  }

  const std::shared_ptr<prometheus::Registry> registry_;
  const bool token_set_;
  const Digest digest_;
  std::unique_ptr<CivetServer> server_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter()
                    .Name("kernelserve_requests_total")
                    .Help("Finished requests by kernel, platform and gRPC code")
                    .Register(*registry_)),
      request_duration_(BuildHistogram()
                            .Name("kernelserve_request_duration_seconds")
                            .Help("Time from receiving a request to answering it")
                            .Register(*registry_)),
      kserve_calls_(BuildCounter()
                        .Name("kernelserve_kserve_calls_total")
                        .Help("Finished calls of the KServe v2 (Open Inference Protocol) front "
                              "door by method and gRPC code")
                        .Register(*registry_)),
      kernel_duration_(BuildHistogram()
                           .Name("kernelserve_kernel_duration_seconds")
                           .Help("Kernel time by the platform's timer")
                           .Register(*registry_)),
      selections_(BuildCounter()
                      .Name("kernelserve_config_selections_total")
                      .Help("Configs chosen, by the tier that answered")
                      .Register(*registry_)),
      identity_requests_(BuildCounter()
                             .Name("kernelserve_identity_requests_total")
                             .Help("Finished kernel calls by caller identity and gRPC code "
                                   "(identities past the first 64 count as \"other\")")
                             .Register(*registry_)),
      quota_refusals_(BuildCounter()
                          .Name("kernelserve_quota_refusals_total")
                          .Help("Calls refused by a per-identity quota, by identity and quota")
                          .Register(*registry_)),
      autotune_runs_(BuildCounter()
                         .Name("kernelserve_autotune_runs_total")
                         .Help("Tuning runs by outcome (ok, all_failed, error)")
                         .Register(*registry_)),
      autotune_duration_(BuildHistogram()
                             .Name("kernelserve_autotune_duration_seconds")
                             .Help("Wall time of tuning runs")
                             .Register(*registry_)
                             .Add({}, TuningBuckets())),
      queue_depth_(BuildGauge()
                       .Name("kernelserve_queue_depth")
                       .Help("Requests queued or running per device")
                       .Register(*registry_)),
      inflight_(BuildGauge()
                    .Name("kernelserve_inflight_requests")
                    .Help("Requests accepted and not yet answered")
                    .Register(*registry_)
                    .Add({})),
      store_errors_(BuildCounter()
                        .Name("kernelserve_store_errors_total")
                        .Help("Failed operations on the persistent config store")
                        .Register(*registry_)),
      memory_used_(BuildGauge()
                       .Name("kernelserve_device_memory_used_bytes")
                       .Help("Memory in use on each device (host memory for the cpu)")
                       .Register(*registry_)),
      memory_total_(BuildGauge()
                        .Name("kernelserve_device_memory_total_bytes")
                        .Help("Memory of each device (host memory for the cpu)")
                        .Register(*registry_)),
      pinned_bytes_(BuildGauge()
                        .Name("kernelserve_pinned_host_bytes")
                        .Help("Page-locked host memory of GPU calls (--max-pinned-bytes), by "
                              "state: in_use (held by tensors) or cached (kept for reuse)")
                        .Register(*registry_)),
      pinned_allocations_(BuildCounter()
                              .Name("kernelserve_pinned_host_allocations_total")
                              .Help("Blocks the pinned pool allocated anew (cudaHostAlloc) "
                                    "rather than reused")
                              .Register(*registry_)
                              .Add({})),
      pinned_refusals_(BuildCounter()
                           .Name("kernelserve_pinned_host_refusals_total")
                           .Help("Tensors that found the pinned pool full and took the staged "
                                 "path through pageable memory")
                           .Register(*registry_)
                           .Add({})),
      received_(BuildCounter()
                    .Name("kernelserve_received_bytes_total")
                    .Help("Bytes of request messages received")
                    .Register(*registry_)
                    .Add({})),
      sent_(BuildCounter()
                .Name("kernelserve_sent_bytes_total")
                .Help("Bytes of response messages sent")
                .Register(*registry_)
                .Add({})),
      queue_wait_(BuildHistogram()
                      .Name("kernelserve_queue_wait_seconds")
                      .Help("Time requests waited in a device's queue before their work started")
                      .Register(*registry_)),
      build_info_(BuildGauge()
                      .Name("kernelserve_build_info")
                      .Help("1, labelled with the server's version, CUDA toolkit and commit")
                      .Register(*registry_)),
      resident_bytes_(BuildGauge()
                          .Name("kernelserve_resident_bytes")
                          .Help("Bytes of resident tensors held on each device")
                          .Register(*registry_)),
      resident_tensors_(BuildGauge()
                            .Name("kernelserve_resident_tensors")
                            .Help("Resident tensors held on each device")
                            .Register(*registry_)),
      resident_created_(BuildCounter()
                            .Name("kernelserve_resident_created_total")
                            .Help("Resident tensors created")
                            .Register(*registry_)
                            .Add({})),
      resident_expired_(BuildCounter()
                            .Name("kernelserve_resident_expired_total")
                            .Help("Resident tensors deleted after their ttl without a call")
                            .Register(*registry_)
                            .Add({})),
      resident_refusals_(BuildCounter()
                             .Name("kernelserve_resident_refusals_total")
                             .Help("Resident tensor creates refused, by the cap that refused "
                                   "them")
                             .Register(*registry_)) {}

Metrics::~Metrics() {
  if (endpoint_ != nullptr) endpoint_->Stop();
}

absl::StatusOr<int> Metrics::Serve(const std::string& address, const std::string& bearer_token) {
  auto endpoint = std::make_unique<MetricsEndpoint>(registry_, bearer_token);
  try {
    endpoint->Start(address);
  } catch (const std::exception& e) {
    return MetricsListenError(address, e.what());
  }
  endpoint_ = std::move(endpoint);
  const std::vector<int> ports = endpoint_->ports();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("metrics: no port bound for ", address));
  }
  return ports.front();
}

void Metrics::Request(std::string_view kernel, std::string_view platform, std::string_view code,
                      double seconds) {
  request_series_.Get({kernel, platform, code}).Increment();
  request_duration_series_.Get({kernel}, LatencyBuckets()).Observe(seconds);
}

void Metrics::InferenceProtocolCall(std::string_view method, std::string_view code) {
  kserve_call_series_.Get({method, code}).Increment();
}

void Metrics::KernelRun(std::string_view kernel, std::string_view platform, std::string_view device,
                        double seconds) {
  kernel_duration_series_.Get({kernel, platform, device}, LatencyBuckets()).Observe(seconds);
}

void Metrics::IdentityRequest(std::string_view identity, std::string_view code) {
  identity_series_.Get({identity, code}).Increment();
}

void Metrics::QuotaRefusal(std::string_view identity, std::string_view quota) {
  quota_refusals_.Add({{"identity", S(identity)}, {"quota", S(quota)}}).Increment();
}

void Metrics::ConfigSelection(std::string_view kernel, std::string_view source) {
  selection_series_.Get({kernel, source}).Increment();
}

void Metrics::AutotuneRun(std::string_view kernel, std::string_view outcome, double seconds) {
  autotune_runs_.Add({{"kernel", S(kernel)}, {"outcome", S(outcome)}}).Increment();
  autotune_duration_.Observe(seconds);
}

void Metrics::QueueDepth(std::string_view device, int depth) {
  queue_depth_series_.Get({device}).Set(depth);
}

void Metrics::InflightRequestsAdd(int64_t delta) {
  inflight_.Increment(static_cast<double>(delta));  // atomic: concurrent updates never go stale
}

void Metrics::QueueWait(std::string_view device, double seconds) {
  queue_wait_series_.Get({device}, LatencyBuckets()).Observe(seconds);
}

void Metrics::ExportKnownSeries(const KnownSeries& known) {
  // The codes the error-ratio alert and the dashboard's panels select, and OK.
  static constexpr std::string_view kCodes[] = {
      "OK",          "INVALID_ARGUMENT", "CANCELLED", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED",
      "UNAVAILABLE", "INTERNAL",         "UNKNOWN",   "DATA_LOSS"};
  for (const auto& [kernel, platform] : known.kernel_platforms) {
    for (std::string_view code : kCodes) {
      requests_.Add({{"kernel", kernel}, {"platform", platform}, {"code", S(code)}});
    }
  }
  for (const std::string& kernel : known.kernels) {
    request_duration_.Add({{"kernel", kernel}}, LatencyBuckets());
    for (const char* outcome : {"ok", "all_failed", "error"}) {
      autotune_runs_.Add({{"kernel", kernel}, {"outcome", outcome}});
    }
    for (const std::string& source : known.config_sources) {
      selections_.Add({{"kernel", kernel}, {"source", source}});
    }
  }
  for (const std::string& identity : known.identities) {
    for (std::string_view code : kCodes) {
      identity_requests_.Add({{"identity", identity}, {"code", S(code)}});
    }
    for (const char* quota : {"rate", "inflight_bytes", "regions", "shared_memory_bytes"}) {
      quota_refusals_.Add({{"identity", identity}, {"quota", quota}});
    }
  }
  for (const std::string& device : known.devices) {
    queue_depth_.Add({{"device", device}}).Set(0);
    queue_wait_.Add({{"device", device}}, LatencyBuckets());
    Resident(device, 0, 0);
  }
  for (const char* cap : {"max_bytes", "quota_bytes", "max_tensors", "gpu_room", "out_of_memory"}) {
    resident_refusals_.Add({{"cap", cap}});
  }
  if (!known.store.empty()) {
    for (const char* op : {"get", "put", "delete", "lease", "list"}) {
      store_errors_.Add({{"store", known.store}, {"op", op}});
    }
  }
  build_info_.Add({{"version", known.version}, {"cuda", known.cuda}, {"git", known.git}}).Set(1);
}

void Metrics::Resident(std::string_view device, int64_t bytes, int tensors) {
  resident_bytes_.Add({{"device", S(device)}}).Set(static_cast<double>(bytes));
  resident_tensors_.Add({{"device", S(device)}}).Set(tensors);
}

void Metrics::ResidentCreated() { resident_created_.Increment(); }

void Metrics::ResidentExpired(int tensors) { resident_expired_.Increment(tensors); }

void Metrics::ResidentRefused(std::string_view cap) {
  resident_refusals_.Add({{"cap", S(cap)}}).Increment();
}

void Metrics::StoreError(std::string_view store, std::string_view op) {
  store_errors_.Add({{"store", S(store)}, {"op", S(op)}}).Increment();
}

void Metrics::DeviceMemory(std::string_view device, int64_t used_bytes, int64_t total_bytes) {
  memory_used_.Add({{"device", S(device)}}).Set(static_cast<double>(used_bytes));
  memory_total_.Add({{"device", S(device)}}).Set(static_cast<double>(total_bytes));
}

void Metrics::PinnedHost(int64_t in_use_bytes, int64_t cached_bytes, int64_t new_allocations,
                         int64_t new_refusals) {
  pinned_bytes_.Add({{"state", "in_use"}}).Set(static_cast<double>(in_use_bytes));
  pinned_bytes_.Add({{"state", "cached"}}).Set(static_cast<double>(cached_bytes));
  if (new_allocations > 0) pinned_allocations_.Increment(static_cast<double>(new_allocations));
  if (new_refusals > 0) pinned_refusals_.Increment(static_cast<double>(new_refusals));
}

void Metrics::Received(int64_t bytes) { received_.Increment(static_cast<double>(bytes)); }

void Metrics::Sent(int64_t bytes) { sent_.Increment(static_cast<double>(bytes)); }

}  // namespace kernelserve::server
