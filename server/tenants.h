// Tenants: what the server keeps per identity: its in-flight bytes under a quota, its request
// rate (a token bucket) and the label its metrics carry.
#ifndef KERNELSERVE_SERVER_TENANTS_H_
#define KERNELSERVE_SERVER_TENANTS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve::server {

// Per-identity limits. Every field has a default; 0 means no limit of the identity's own (the
// server-wide ones still hold).
struct QuotaOptions {
  int64_t inflight_bytes = 0;      // bytes of the identity's calls in flight
  double requests_per_second = 0;  // calls the identity may start per second, on average
  double request_burst = 0;        // calls it may start at once; 0 = max(1, requests_per_second)
  // Distinct identities that get a metrics label of their own (first come, first served, after
  // the `known` identities of Tenants); the others are counted under "other".
  int max_labels = 64;
};

// One identity's state. Thread safety: thread-safe.
class Tenant {
 public:
  using Clock = std::chrono::steady_clock;

  Tenant(std::string identity, std::string label, const QuotaOptions& quota);
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  const std::string& identity() const { return identity_; }
  // The value of the identity label on its metrics: the identity, or "other".
  const std::string& label() const { return label_; }

  // Takes one call from the rate bucket at `now`. ResourceExhausted naming the identity and the
  // flags when the bucket is empty.
  absl::Status TakeRequest(Clock::time_point now = Clock::now());

  // Takes `bytes` more of the identity's in-flight quota; ResourceExhausted naming the
  // identity, the bytes held and the flag when they would pass it (nothing taken).
  absl::Status Hold(int64_t bytes, const char* what);
  // Gives back `bytes` taken by Hold.
  void Release(int64_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t held() const { return held_.load(std::memory_order_relaxed); }

 private:
  const std::string identity_;
  const std::string label_;
  const int64_t max_inflight_bytes_;  // 0 = none
  const double rate_;                 // per second; 0 = none
  const double burst_;
  std::atomic<int64_t> held_{0};
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  Clock::time_point refilled_ ABSL_GUARDED_BY(mu_);
};

// The tenants of a server, one per identity seen. Thread safety: thread-safe.
class Tenants {
 public:
  // `known` identities (those of the token file, "anonymous") always get their own label.
  // `on_refusal(label, quota)` (may be empty) is told of every refusal: quota is "rate" or
  // "inflight_bytes".
  Tenants(QuotaOptions quota, const std::vector<std::string>& known,
          std::function<void(const std::string& label, const char* quota)> on_refusal = {});
  Tenants(const Tenants&) = delete;
  Tenants& operator=(const Tenants&) = delete;

  // The tenant of `identity`, made on first use. Never null; lives as long as the Tenants.
  std::shared_ptr<Tenant> Of(const std::string& identity);
  // Admits one call of `identity` under its rate: Of(identity) when the bucket had a call left,
  // ResourceExhausted otherwise (and on_refusal told).
  absl::StatusOr<std::shared_ptr<Tenant>> Admit(const std::string& identity);
  // Tells on_refusal of an in-flight quota refusal of `tenant`.
  void RefusedBytes(const Tenant& tenant) const;

  const QuotaOptions& quota() const { return quota_; }
  // Labels given so far (the known ones first).
  std::vector<std::string> Labels() const;

 private:
  const QuotaOptions quota_;
  const std::function<void(const std::string&, const char*)> on_refusal_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> tenants_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_TENANTS_H_
