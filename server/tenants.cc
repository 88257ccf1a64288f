#include "server/tenants.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kernelserve::server {

Tenant::Tenant(std::string identity, std::string label, const QuotaOptions& quota)
    : identity_(std::move(identity)),
      label_(std::move(label)),
      max_inflight_bytes_(quota.inflight_bytes),
      rate_(quota.requests_per_second),
      burst_(quota.request_burst > 0 ? quota.request_burst
                                     : std::max(1.0, quota.requests_per_second)),
      tokens_(burst_),
      refilled_(Clock::now()) {}

absl::Status Tenant::TakeRequest(Clock::time_point now) {
  if (rate_ <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (now > refilled_) {
    const double elapsed = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
    refilled_ = now;
  }
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "identity '", identity_, "' is over its request rate (--quota-requests-per-second=", rate_,
      ", --quota-request-burst=", burst_, "); retry after ", (1 - tokens_) / rate_, " s"));
}

absl::Status Tenant::Hold(int64_t bytes, const char* what) {
  if (max_inflight_bytes_ <= 0) {
    held_.fetch_add(bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  int64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (bytes > max_inflight_bytes_ - held) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "in-flight bytes of identity '", identity_, "': this call's ", bytes, " bytes of ", what,
          " with ", held, " bytes held would pass --quota-inflight-bytes=", max_inflight_bytes_));
    }
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return absl::OkStatus();
}

Tenants::Tenants(QuotaOptions quota, const std::vector<std::string>& known,
                 std::function<void(const std::string&, const char*)> on_refusal)
    : quota_(std::move(quota)), on_refusal_(std::move(on_refusal)) {
  absl::MutexLock lock(&mu_);
  for (const std::string& identity : known) {
    if (tenants_.contains(identity)) continue;
    tenants_[identity] = std::make_shared<Tenant>(identity, identity, quota_);
    labels_.push_back(identity);
  }
}

std::shared_ptr<Tenant> Tenants::Of(const std::string& identity) {
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(identity);
  if (it != tenants_.end()) return it->second;
  const bool labelled = static_cast<int>(labels_.size()) < quota_.max_labels;
  if (labelled) labels_.push_back(identity);
  auto tenant = std::make_shared<Tenant>(identity, labelled ? identity : "other", quota_);
  tenants_[identity] = tenant;
  return tenant;
}

absl::StatusOr<std::shared_ptr<Tenant>> Tenants::Admit(const std::string& identity) {
  std::shared_ptr<Tenant> tenant = Of(identity);
  absl::Status admitted = tenant->TakeRequest();
  if (!admitted.ok()) {
    if (on_refusal_) on_refusal_(tenant->label(), "rate");
    return admitted;
  }
  return tenant;
}

void Tenants::RefusedBytes(const Tenant& tenant) const {
  if (on_refusal_) on_refusal_(tenant.label(), "inflight_bytes");
}

std::vector<std::string> Tenants::Labels() const {
  absl::MutexLock lock(&mu_);
  return labels_;
}

}  // namespace kernelserve::server
