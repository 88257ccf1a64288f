#include "server/call_tracker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kernelserve::server {

CallTracker::CallTracker(InflightBudget* budget, Metrics* metrics,
                         grpc::CallbackServerContext* context)
    : budget_(budget), metrics_(metrics), context_(context), start_(Clock::now()) {}

CallTracker::~CallTracker() { ReleaseHold(); }

absl::Status CallTracker::Hold(int64_t bytes, const char* what) {
  if (!holds_request_ && budget_->closed()) {
    return absl::UnavailableError(
        "the server is shutting down: it finishes the calls it holds and takes no new ones; "
        "retry on another replica");
  }
  if (!budget_->TryAcquire(bytes, /*count_request=*/!holds_request_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "in-flight bytes: this call's ", bytes, " bytes of ", what, " with ", budget_->bytes(),
        " bytes held would pass --max-inflight-bytes=", budget_->max_bytes()));
  }
  if (tenant_ != nullptr) {
    if (absl::Status quota = tenant_->Hold(bytes, what); !quota.ok()) {
      budget_->Release(bytes, /*requests=*/holds_request_ ? 0 : 1);
      metrics_->QuotaRefusal(tenant_->label(), "inflight_bytes");
      return quota;
    }
  }
  held_bytes_ += bytes;
  if (!holds_request_) metrics_->InflightRequestsAdd(1);
  holds_request_ = true;
  return absl::OkStatus();
}

void CallTracker::ReleaseHold() {
  if (!holds_request_) return;
  budget_->Release(held_bytes_);
  if (tenant_ != nullptr) tenant_->Release(held_bytes_);
  held_bytes_ = 0;
  holds_request_ = false;
  metrics_->InflightRequestsAdd(-1);
}

AnswerHold CallTracker::KeepForAnswer(int64_t answer_bytes) {
  ReleaseHold();
  std::shared_ptr<Tenant> tenant = tenant_;
  if (tenant != nullptr && !tenant->Hold(answer_bytes, "answer").ok()) tenant.reset();
  return AnswerHold(budget_, std::move(tenant), answer_bytes);
}

AnswerHold::AnswerHold(InflightBudget* budget, std::shared_ptr<Tenant> tenant, int64_t bytes)
    : budget_(budget), tenant_(std::move(tenant)), bytes_(bytes) {
  budget_->Take(bytes_);
}

AnswerHold& AnswerHold::operator=(AnswerHold&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  budget_ = std::exchange(other.budget_, nullptr);
  tenant_ = std::move(other.tenant_);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}

void AnswerHold::Reset() {
  if (budget_ != nullptr) budget_->Release(bytes_, /*requests=*/0);
  if (tenant_ != nullptr) tenant_->Release(bytes_);
  budget_ = nullptr;
  tenant_.reset();
  bytes_ = 0;
}

absl::Status CallTracker::ClientGone() const {
  if (context_ == nullptr) return absl::OkStatus();
  const auto now = std::chrono::system_clock::now();
  const auto deadline = context_->deadline();
  const bool cancelled = context_->IsCancelled();
  if (now > deadline || (cancelled && deadline - now < kDeadlineSlack)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the deadline passed while the call ran (", seconds(), " s)"));
  }
  if (cancelled) return absl::CancelledError("the client cancelled the call");
  return absl::OkStatus();
}

absl::Status CallTracker::Outcome(absl::Status status) const {
  if (status.ok() || absl::IsCancelled(status) || absl::IsDeadlineExceeded(status)) {
    absl::Status gone = ClientGone();
    if (!gone.ok()) return gone;
  }
  return status;
}

void CallTracker::Record(const absl::Status& outcome, int64_t response_bytes) const {
  const std::string code = absl::StatusCodeToString(outcome.code());
  metrics_->Request(kernel, platform, code, seconds());
  if (tenant_ != nullptr) metrics_->IdentityRequest(tenant_->label(), code);
  if (outcome.ok()) metrics_->Sent(response_bytes);
}

double CallTracker::seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

}  // namespace kernelserve::server
