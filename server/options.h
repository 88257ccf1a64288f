// ServerOptions: everything the server is configured with, read from the command-line flags.
#ifndef KERNELSERVE_SERVER_OPTIONS_H_
#define KERNELSERVE_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/utils/log.h"

namespace kernelserve::server {

// The most --max-shared-memory-regions may be.
inline constexpr int kMaxSharedMemoryRegions = 8192;

// A value type. Every field has a default (the flags' defaults).
struct ServerOptions {
  std::string listen = "127.0.0.1:50051";          // gRPC address (port 0 = pick a free one)
  std::string metrics_listen = "127.0.0.1:9464";   // /metrics address; "" or "off" = none
  std::string cache = "file";                      // OpenStore spec: file[:PATH], redis://, memory
  bool autotune = false;                           // tune on a cache miss
  std::string devices = "all";                     // "all", "cpu" or GPU ordinals "0,1"
  int64_t max_message_bytes = int64_t{1} << 30;    // both directions
  int max_queue = 1024;                            // queued requests per device
  int gpu_lanes = 2;                               // calls each GPU runs at once (streams)
  int64_t max_inflight_bytes = int64_t{4} << 30;   // request bytes accepted and not answered
  int64_t max_synthetic_bytes = int64_t{1} << 30;  // inputs Autotune makes up from shapes
  int64_t max_pinned_bytes = int64_t{4} << 30;     // page-locked host memory; 0 = none
  // GPU calls with at least this many input bytes wait at the launch gate, so that kernel_us
  // times the kernel alone (launch_us the host's queuing); 0 = every call, < 0 = none (the
  // gate costs a call 10-50 us of latency).
  int64_t launch_gate_min_bytes = -1;
  // Regions clients on this host may register: "auto" (system on loopback and unix
  // listeners, off elsewhere), "off", "system"; "cuda" and "all" are refused until CUDA
  // regions are served.
  std::string shared_memory = "auto";
  int64_t max_shared_memory_bytes = int64_t{16} << 30;  // registered bytes in all
  // Serve system regions while running as root (a root server can open any object; each
  // registration is still checked against the caller's own access).
  bool shared_memory_as_root = false;
  int max_shared_memory_regions = 1024;   // registered regions in all
  int quota_shared_memory_regions = 256;  // regions of one identity
  int64_t quota_shared_memory_bytes = 0;  // of one identity; 0 = the max only
  // Page-locked bytes of system regions (servers with GPUs), in all and of one identity (0 =
  // the max only); past them regions stay unpinned.
  int64_t max_pinned_shared_memory_bytes = int64_t{4} << 30;
  int64_t quota_pinned_bytes = 0;
  // Resident tensors (CreateTensor): bytes in all and of one identity (0 = the max only), how
  // many in all, and their idle expiry when a create names none, and at most.
  int64_t max_resident_bytes = int64_t{4} << 30;
  int64_t quota_resident_bytes = 0;
  int max_resident_tensors = 4096;
  absl::Duration resident_ttl = absl::Hours(1);
  absl::Duration max_resident_ttl = absl::Hours(24);
  // One tuning's time budget: the default and the most a call asks for; zero = no limit.
  absl::Duration autotune_budget = absl::Seconds(30);
  // Bearer tokens with their identities and roles (server/auth.h, ParseTokenFile); "" = none.
  std::string auth_token_file;
  std::string admin_identities;          // comma-separated identities given the admin role
  std::string anonymous_role = "admin";  // role of callers without an identity: admin or caller
  std::string metrics_auth_token_file;   // bearer token a /metrics scrape must carry; "" = none
  int64_t quota_inflight_bytes = 0;      // per identity; 0 = only --max-inflight-bytes
  double quota_requests_per_second = 0;  // per identity; 0 = no rate limit
  double quota_request_burst = 0;        // per identity; 0 = max(1, requests per second)
  std::string tls_cert;                  // PEM; "" = plaintext
  std::string tls_key;                   // PEM; required with tls_cert
  std::string tls_client_ca;             // PEM; set = clients must present a cert
  bool reflection = false;               // gRPC server reflection
  absl::Duration grace_period = absl::Seconds(30);  // drain time on SIGTERM/SIGINT
  // Connections (each closed with a GOAWAY; clients reconnect on their next call). Zero = no
  // limit.
  absl::Duration max_connection_idle = absl::Minutes(10);    // without calls this long
  absl::Duration max_connection_age = absl::ZeroDuration();  // this long after it opened
  // After max_connection_age, how long its calls in progress may take before it closes.
  absl::Duration max_connection_age_grace = absl::ZeroDuration();
  logging::Level log_level = logging::Level::kInfo;  // least severe log lines written
};

// The options the flags hold. InvalidArgument naming the flag for out-of-range values.
// REQUIRES: absl::ParseCommandLine has run.
absl::StatusOr<ServerOptions> OptionsFromFlags();

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_OPTIONS_H_
