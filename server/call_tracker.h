// CallTracker: what the server keeps of one kernel call (a unary RPC or one stream item) from
// arrival to answer: its start, metric labels, the bytes it holds in the in-flight budget, and
// the status its client sees in the end.
#ifndef KERNELSERVE_SERVER_CALL_TRACKER_H_
#define KERNELSERVE_SERVER_CALL_TRACKER_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "server/budget.h"
#include "server/identity.h"
#include "server/metrics.h"
#include "server/tenants.h"

namespace kernelserve::server {

// How close to its deadline a cancelled call counts as having run out of time.
inline constexpr std::chrono::milliseconds kDeadlineSlack{100};

// The bytes of an answer waiting to be written (a stream's), kept in the in-flight budget, and in
// its identity's quota when that has room, after its call's hold ended (CallTracker::
// KeepForAnswer); given back when destroyed. Move-only.
// Thread safety: not thread-safe; one owner at a time.
class AnswerHold {
 public:
  AnswerHold() = default;
  AnswerHold(AnswerHold&& other) noexcept { *this = std::move(other); }
  AnswerHold& operator=(AnswerHold&& other) noexcept;
  ~AnswerHold() { Reset(); }

  int64_t bytes() const { return bytes_; }

 private:
  friend class CallTracker;
  // Takes the bytes (see KeepForAnswer). `budget` must outlive the hold.
  AnswerHold(InflightBudget* budget, std::shared_ptr<Tenant> tenant, int64_t bytes);
  // Gives the bytes back; the hold is empty after.
  void Reset();

  InflightBudget* budget_ = nullptr;
  std::shared_ptr<Tenant> tenant_;  // null: not counted in an identity's quota
  int64_t bytes_ = 0;
};

// Thread safety: one thread at a time (the handler, then the worker that runs the call), but
// ClientGone, which any thread may call.
class CallTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // Borrows all three; they must outlive the tracker.
  CallTracker(InflightBudget* budget, Metrics* metrics, grpc::CallbackServerContext* context);
  // Gives back what the call holds in the budget.
  ~CallTracker();
  CallTracker(const CallTracker&) = delete;
  CallTracker& operator=(const CallTracker&) = delete;

  // Takes `bytes` more of the in-flight budget for this call (its first take also counts the
  // request), and of its identity's quota. ResourceExhausted naming `what` and the flag when
  // either cannot take them (nothing taken); Unavailable for a first take once the budget is
  // closed (the server drains).
  absl::Status Hold(int64_t bytes, const char* what);
  // Gives back everything held now (the call is answered or about to be).
  void ReleaseHold();
  // ReleaseHold, except that `answer_bytes` (the call's answer, queued to be sent) stay taken
  // from the budget, as bytes no longer counted as a request, even past the cap (the answer
  // exists already), and from the identity's quota when it has room for them, until the
  // returned hold is destroyed (once the answer is written).
  AnswerHold KeepForAnswer(int64_t answer_bytes);
  // Bytes this call holds in the budget now.
  int64_t held_bytes() const { return held_bytes_; }

  // Why the client no longer waits for this call: DEADLINE_EXCEEDED once its deadline passed,
  // CANCELLED once it cancelled; OK while it waits. A cancellation within kDeadlineSlack of the
  // deadline is the deadline: a client cancels the call when its own deadline passes, a moment
  // before the server's copy of that deadline (sent as a timeout) does. Thread-safe.
  absl::Status ClientGone() const;
  // The status the client sees for a call that ends with `status` now: a call that succeeded
  // or was interrupted after the client went away ends as ClientGone() says, so it is recorded
  // and finished with the code the client saw.
  absl::Status Outcome(absl::Status status) const;
  // Records the finished call (code, duration, bytes sent when OK) under its labels.
  void Record(const absl::Status& outcome, int64_t response_bytes) const;

  // Who makes the call, once authenticated (an anonymous caller until then), and the state of
  // its identity (null = no per-identity quota or metrics). REQUIRES: nothing held yet.
  const Caller& caller() const { return caller_; }
  void set_caller(Caller caller, std::shared_ptr<Tenant> tenant = nullptr) {
    caller_ = std::move(caller);
    tenant_ = std::move(tenant);
  }

  grpc::CallbackServerContext* context() const { return context_; }
  Clock::time_point start() const { return start_; }
  double seconds() const;

  // Metric labels, known as far as the call got ("unknown" until then).
  std::string kernel = "unknown";
  std::string platform = "unknown";

 private:
  InflightBudget* const budget_;
  Metrics* const metrics_;
  grpc::CallbackServerContext* const context_;
  const Clock::time_point start_;
  Caller caller_;
  std::shared_ptr<Tenant> tenant_;
  int64_t held_bytes_ = 0;
  bool holds_request_ = false;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_CALL_TRACKER_H_
