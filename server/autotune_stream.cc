#include "server/autotune_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/parse.h"
#include "server/status.h"

namespace kernelserve::server {
namespace {

grpc::Status SerializeProgress(const v1::AutotuneProgress& progress, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  return grpc::SerializationTraits<v1::AutotuneProgress>::Serialize(progress, out, &own_buffer);
}

}  // namespace

AutotuneStreamCall::AutotuneStreamCall(InflightBudget* budget, Metrics* metrics,
                                       grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* raw_request)
    : tracker_(budget, metrics, context),
      // As UnaryCall: the call's own request buffer, cleared once parsed.
      raw_request_(const_cast<grpc::ByteBuffer*>(raw_request)),
      received_bytes_(raw_request == nullptr ? 0 : static_cast<int64_t>(raw_request->Length())) {}

absl::Status AutotuneStreamCall::Parse(HostAllocator* /*allocator*/) {
  return wire::ParseRequest(raw_request_, &request_);
}

void AutotuneStreamCall::Progress(const TuneProgress& progress) {
  v1::AutotuneProgress message;
  done_ = std::max(done_, progress.done);
  message.set_candidates_done(done_);
  message.set_candidates_total(progress.total);
  message.set_best_us(progress.best_seconds * 1e6);
  message.set_elapsed_seconds(progress.elapsed_seconds);
  grpc::ByteBuffer buffer;
  if (!SerializeProgress(message, &buffer).ok()) return;  // a progress message is not owed
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (final_.has_value()) return;
    next_progress_ = std::move(buffer);
    action = NextLocked();
  }
  Take(action);
}

void AutotuneStreamCall::Finish(const absl::Status& status) {
  absl::Status outcome = tracker_.Outcome(status);
  tracker_.ReleaseHold();
  grpc::ByteBuffer last;
  if (outcome.ok()) {
    v1::AutotuneProgress message;
    message.set_candidates_done(std::max(done_, response_.candidates_timed()));
    message.set_candidates_total(response_.candidates_total());
    message.set_best_us(response_.best_us());
    message.set_elapsed_seconds(response_.elapsed_seconds());
    *message.mutable_result() = std::move(response_);
    const grpc::Status serialized = SerializeProgress(message, &last);
    if (!serialized.ok()) {
      outcome = absl::InternalError(
          absl::StrCat("serializing the response: ", serialized.error_message()));
    }
  }
  tracker_.Record(outcome, outcome.ok() ? static_cast<int64_t>(last.Length()) : 0);
  Action action;
  {
    absl::MutexLock lock(&mu_);
    next_progress_.reset();  // the last message says all of it
    if (outcome.ok()) last_ = std::move(last);
    final_ = ToGrpcStatus(outcome);
    action = NextLocked();
  }
  Take(action);
}

void AutotuneStreamCall::OnWriteDone(bool /*ok*/) {
  // A failed write means the client is gone: the next writes fail at once too, and the call's
  // interrupt stops the tuning.
  Action action;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    action = NextLocked();
  }
  Take(action);
}

AutotuneStreamCall::Action AutotuneStreamCall::NextLocked() {
  Action action;
  if (writing_ || finished_) return action;
  if (last_.has_value()) {
    writing_buffer_ = *std::move(last_);
    last_.reset();
  } else if (final_.has_value()) {
    finished_ = true;
    action.finish = final_;
    return action;
  } else if (next_progress_.has_value()) {
    writing_buffer_ = *std::move(next_progress_);
    next_progress_.reset();
  } else {
    return action;
  }
  writing_ = true;
  action.write = &writing_buffer_;  // not changed until this write is done
  return action;
}

void AutotuneStreamCall::Take(const Action& action) {
  // Outside mu_: gRPC may run a reaction before these return.
  if (action.write != nullptr) StartWrite(action.write);
  if (action.finish.has_value()) ServerWriteReactor::Finish(*action.finish);
}

}  // namespace kernelserve::server
