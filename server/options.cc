#include "server/options.h"

#include <limits>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address: host:port (port 0 = any free port) or unix:PATH");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics address; empty or 'off' disables it");
ABSL_FLAG(std::string, cache, "file",
          "persistent config store: file (under ~/.cache/kernelserve), file:PATH, "
          "redis://host:port/db or memory");
ABSL_FLAG(bool, autotune, false, "tune configs on a cache miss instead of using the heuristic");
ABSL_FLAG(absl::Duration, autotune_budget, absl::Seconds(30),
          "time one tuning may take before it stops starting candidates and keeps the best so "
          "far (in memory only, never the config store); the default and the most an Autotune "
          "call's time_budget_ms gets; 0 = no limit");
ABSL_FLAG(std::string, devices, "all", "devices to serve: all, cpu, or GPU ordinals like 0,1");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{1} << 30,
          "largest gRPC message accepted or sent, in bytes");
ABSL_FLAG(int32_t, max_queue, 1024, "queued requests per device before RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, gpu_lanes, 2,
          "calls each GPU runs at once, each on its own CUDA stream, so that one call's copies "
          "overlap another's kernel; 1 = one call at a time");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{4} << 30,
          "bytes of the requests in flight (received, synthesized, and their outputs) before "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_synthetic_bytes, int64_t{1} << 30,
          "largest input bytes Autotune makes up for a call that sends shapes only");
ABSL_FLAG(int64_t, max_pinned_bytes, int64_t{4} << 30,
          "page-locked host memory kept for the tensors of GPU calls (request bytes are parsed "
          "into it and outputs downloaded into it, so each copy is one DMA); 0 = none");
ABSL_FLAG(int64_t, launch_gate_min_bytes, -1,
          "GPU calls whose inputs hold at least this many bytes hold the stream at a gate while "
          "the host queues the kernel, so that kernel_us is the kernel alone and launch_us the "
          "host's part; the gate costs a call 10-50 us of latency. 0 = every call, -1 = none "
          "(kernel_us then counts the host's queuing up to the kernel's submission)");
ABSL_FLAG(std::string, shared_memory, "auto",
          "shared memory clients on this host may register for their tensors: auto (all on "
          "loopback and unix listeners, off elsewhere), off, system (POSIX shm), cuda (CUDA IPC "
          "handles of GPU buffers) or all");
ABSL_FLAG(bool, shared_memory_as_root, false,
          "serve system shared memory while running as root (off by default: a root server "
          "could open any user's object); each registration is still checked against the "
          "caller's own access to the object");
ABSL_FLAG(int64_t, max_shared_memory_bytes, int64_t{16} << 30,
          "bytes of shared memory registered in all before RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_shared_memory_regions, 1024,
          "shared-memory regions registered in all before RESOURCE_EXHAUSTED (1 to 8192)");
ABSL_FLAG(int32_t, quota_shared_memory_regions, 256,
          "shared-memory regions one identity may hold registered before RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, quota_shared_memory_bytes, 0,
          "bytes of shared memory one identity may hold registered before RESOURCE_EXHAUSTED; "
          "0 = only --max-shared-memory-bytes");
ABSL_FLAG(int64_t, max_pinned_shared_memory_bytes, int64_t{4} << 30,
          "bytes of system shared-memory regions page-locked for the GPUs in all; regions past "
          "it stay unpinned (their copies are staged)");
ABSL_FLAG(int64_t, quota_pinned_bytes, 0,
          "bytes of one identity's system shared-memory regions page-locked for the GPUs; "
          "regions past it stay unpinned; 0 = only --max-pinned-shared-memory-bytes");
ABSL_FLAG(int64_t, max_resident_bytes, int64_t{4} << 30,
          "bytes of resident tensors (CreateTensor) held in all before RESOURCE_EXHAUSTED; on a "
          "GPU also at most its memory less twice --max-inflight-bytes");
ABSL_FLAG(int64_t, quota_resident_bytes, 0,
          "bytes of resident tensors one identity may hold before RESOURCE_EXHAUSTED; 0 = only "
          "--max-resident-bytes");
ABSL_FLAG(int32_t, max_resident_tensors, 4096,
          "resident tensors held in all before RESOURCE_EXHAUSTED");
ABSL_FLAG(absl::Duration, resident_ttl, absl::Hours(1),
          "a resident tensor no call used this long is deleted, when its create named no ttl");
ABSL_FLAG(absl::Duration, max_resident_ttl, absl::Hours(24),
          "the longest idle time a create may ask to keep its resident tensor for");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of bearer tokens, one per line: IDENTITY ROLE TOKEN (ROLE caller or admin; TOKEN "
          "or sha256:HEX of it), or a single TOKEN (identity 'default', admin); every RPC but "
          "health must then carry one");
ABSL_FLAG(std::string, admin_identities, "",
          "comma-separated identities with the admin role besides the token file's: "
          "cert:SUBJECT (mTLS), uid:N (Unix socket peers) or a token identity");
ABSL_FLAG(std::string, anonymous_role, "admin",
          "role of callers the server cannot name (no tokens, no client certificate, not a Unix "
          "socket peer): admin or caller");
ABSL_FLAG(std::string, metrics_auth_token_file, "",
          "file holding the bearer token a /metrics scrape must carry (Prometheus: "
          "authorization.credentials_file); empty = /metrics is open");
ABSL_FLAG(int64_t, quota_inflight_bytes, 0,
          "in-flight bytes of one identity's calls before RESOURCE_EXHAUSTED; 0 = only "
          "--max-inflight-bytes");
ABSL_FLAG(double, quota_requests_per_second, 0,
          "calls one identity may start per second on average before RESOURCE_EXHAUSTED; 0 = "
          "no limit");
ABSL_FLAG(double, quota_request_burst, 0,
          "calls one identity may start at once under --quota-requests-per-second; 0 = "
          "max(1, the rate)");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (enables TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA that client certificates must chain to (mTLS)");
ABSL_FLAG(bool, reflection, false, "enable gRPC server reflection");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(30),
          "on SIGTERM/SIGINT, how long accepted calls may take to finish");
ABSL_FLAG(absl::Duration, max_connection_idle, absl::Minutes(10),
          "a connection without calls this long is closed (clients reconnect on their next "
          "call); 0 = never");
ABSL_FLAG(absl::Duration, max_connection_age, absl::ZeroDuration(),
          "a connection is closed this long (give or take 10%) after it opened, once its calls "
          "finish, so that clients spread over servers again; 0 = never");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::ZeroDuration(),
          "after --max-connection-age, how long the connection's calls may take before it is "
          "closed under them; 0 = as long as they take");
ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written to stderr: info, warning or error");

namespace kernelserve::server {
namespace {

// The caps on shared-memory regions, each >= 0 (the region counts >= 1, at most
// kMaxSharedMemoryRegions in all).
absl::Status CheckSharedMemoryCaps(const ServerOptions& o) {
  if (o.max_shared_memory_regions < 1 || o.max_shared_memory_regions > kMaxSharedMemoryRegions) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-shared-memory-regions=", o.max_shared_memory_regions,
                     ": expected 1 .. ", kMaxSharedMemoryRegions));
  }
  if (o.quota_shared_memory_regions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quota-shared-memory-regions=", o.quota_shared_memory_regions, ": expected > 0"));
  }
  const std::pair<const char*, int64_t> bytes[] = {
      {"--quota-shared-memory-bytes", o.quota_shared_memory_bytes},
      {"--max-pinned-shared-memory-bytes", o.max_pinned_shared_memory_bytes},
      {"--quota-pinned-bytes", o.quota_pinned_bytes}};
  for (const auto& [flag, value] : bytes) {
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", value, ": expected >= 0"));
    }
  }
  return absl::OkStatus();
}

// The caps of resident tensors: bytes >= 0, a tensor count >= 1, ttls > 0 with the default at
// most the maximum.
absl::Status CheckResidentCaps(const ServerOptions& o) {
  if (o.max_resident_bytes < 0 || o.quota_resident_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.max_resident_bytes < 0 ? "--max-resident-bytes=" : "--quota-resident-bytes=",
                     o.max_resident_bytes < 0 ? o.max_resident_bytes : o.quota_resident_bytes,
                     ": expected >= 0"));
  }
  if (o.max_resident_tensors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-resident-tensors=", o.max_resident_tensors, ": expected > 0"));
  }
  if (o.resident_ttl <= absl::ZeroDuration() || o.max_resident_ttl < o.resident_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("--resident-ttl=", absl::FormatDuration(o.resident_ttl),
                     " and --max-resident-ttl=", absl::FormatDuration(o.max_resident_ttl),
                     ": expected 0 < --resident-ttl <= --max-resident-ttl"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerOptions> OptionsFromFlags() {
  ServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (o.metrics_listen == "off") o.metrics_listen.clear();
  o.cache = absl::GetFlag(FLAGS_cache);
  o.autotune = absl::GetFlag(FLAGS_autotune);
  o.autotune_budget = absl::GetFlag(FLAGS_autotune_budget);
  o.devices = absl::GetFlag(FLAGS_devices);
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.gpu_lanes = absl::GetFlag(FLAGS_gpu_lanes);
  o.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  o.max_synthetic_bytes = absl::GetFlag(FLAGS_max_synthetic_bytes);
  o.max_pinned_bytes = absl::GetFlag(FLAGS_max_pinned_bytes);
  o.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.max_shared_memory_bytes = absl::GetFlag(FLAGS_max_shared_memory_bytes);
  o.shared_memory_as_root = absl::GetFlag(FLAGS_shared_memory_as_root);
  o.launch_gate_min_bytes = absl::GetFlag(FLAGS_launch_gate_min_bytes);
  o.max_shared_memory_regions = absl::GetFlag(FLAGS_max_shared_memory_regions);
  o.quota_shared_memory_regions = absl::GetFlag(FLAGS_quota_shared_memory_regions);
  o.quota_shared_memory_bytes = absl::GetFlag(FLAGS_quota_shared_memory_bytes);
  o.max_pinned_shared_memory_bytes = absl::GetFlag(FLAGS_max_pinned_shared_memory_bytes);
  o.quota_pinned_bytes = absl::GetFlag(FLAGS_quota_pinned_bytes);
  o.max_resident_bytes = absl::GetFlag(FLAGS_max_resident_bytes);
  o.quota_resident_bytes = absl::GetFlag(FLAGS_quota_resident_bytes);
  o.max_resident_tensors = absl::GetFlag(FLAGS_max_resident_tensors);
  o.resident_ttl = absl::GetFlag(FLAGS_resident_ttl);
  o.max_resident_ttl = absl::GetFlag(FLAGS_max_resident_ttl);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.admin_identities = absl::GetFlag(FLAGS_admin_identities);
  o.anonymous_role = absl::GetFlag(FLAGS_anonymous_role);
  o.metrics_auth_token_file = absl::GetFlag(FLAGS_metrics_auth_token_file);
  o.quota_inflight_bytes = absl::GetFlag(FLAGS_quota_inflight_bytes);
  o.quota_requests_per_second = absl::GetFlag(FLAGS_quota_requests_per_second);
  o.quota_request_burst = absl::GetFlag(FLAGS_quota_request_burst);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  o.reflection = absl::GetFlag(FLAGS_reflection);
  o.grace_period = absl::GetFlag(FLAGS_grace_period);
  o.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  o.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  o.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  absl::StatusOr<logging::Level> log_level = logging::ParseLevel(absl::GetFlag(FLAGS_log_level));
  if (!log_level.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--log-level=", absl::GetFlag(FLAGS_log_level),
                                                   ": expected info, warning or error"));
  }
  o.log_level = *log_level;
  if (o.listen.empty()) {
    return absl::InvalidArgumentError("--listen: expected host:port or unix:PATH");
  }
  if (o.max_message_bytes <= 0 || o.max_message_bytes > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-message-bytes=", o.max_message_bytes, ": expected 1 .. 2147483647"));
  }
  if (o.max_queue <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max-queue=", o.max_queue, ": expected > 0"));
  }
  if (o.gpu_lanes < 1 || o.gpu_lanes > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-lanes=", o.gpu_lanes, ": expected 1 .. 16"));
  }
  if (o.max_inflight_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-inflight-bytes=", o.max_inflight_bytes, ": expected > 0"));
  }
  if (o.max_synthetic_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-synthetic-bytes=", o.max_synthetic_bytes, ": expected >= 0"));
  }
  if (o.max_pinned_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-pinned-bytes=", o.max_pinned_bytes, ": expected >= 0"));
  }
  if (o.shared_memory != "auto" && o.shared_memory != "off" && o.shared_memory != "system" &&
      o.shared_memory != "cuda" && o.shared_memory != "all") {
    return absl::InvalidArgumentError(absl::StrCat("--shared-memory=", o.shared_memory,
                                                   ": expected auto, off, system, cuda or all"));
  }
  if (o.max_shared_memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-shared-memory-bytes=", o.max_shared_memory_bytes, ": expected >= 0"));
  }
  KS_RETURN_IF_ERROR(CheckSharedMemoryCaps(o));
  KS_RETURN_IF_ERROR(CheckResidentCaps(o));
  if (o.anonymous_role != "admin" && o.anonymous_role != "caller") {
    return absl::InvalidArgumentError(
        absl::StrCat("--anonymous-role=", o.anonymous_role, ": expected admin or caller"));
  }
  if (o.quota_inflight_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quota-inflight-bytes=", o.quota_inflight_bytes, ": expected >= 0"));
  }
  if (!(o.quota_requests_per_second >= 0) || !(o.quota_request_burst >= 0)) {
    return absl::InvalidArgumentError(
        "--quota-requests-per-second and --quota-request-burst: expected >= 0");
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: expected both or neither");
  }
  if (!o.tls_client_ca.empty() && o.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca: expected --tls-cert and --tls-key too");
  }
  if (o.autotune_budget < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--autotune-budget=", absl::FormatDuration(o.autotune_budget),
                     ": expected >= 0 (0 = no limit)"));
  }
  if (o.grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--grace-period: expected >= 0");
  }
  for (const auto& [flag, value] :
       {std::pair{"--max-connection-idle", o.max_connection_idle},
        std::pair{"--max-connection-age", o.max_connection_age},
        std::pair{"--max-connection-age-grace", o.max_connection_age_grace}}) {
    if (value < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", absl::FormatDuration(value), ": expected >= 0 (0 = no limit)"));
    }
  }
  return o;
}

}  // namespace kernelserve::server
