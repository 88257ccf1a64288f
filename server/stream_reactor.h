// StreamReactor: a bidirectional stream of kernel calls, for any protocol whose requests map
// onto ExecuteRequest (kernelserve.v1's ExecuteStream, the Open Inference Protocol's
// ModelStreamInfer). Each request goes through the call pipeline (server/pipeline.h) as it
// arrives; each answer (result or in-band error) is written when ready. An item that does not
// parse is answered in-band and the stream goes on.
#ifndef KERNELSERVE_SERVER_STREAM_REACTOR_H_
#define KERNELSERVE_SERVER_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/call.h"
#include "server/pipeline.h"
#include "server/service_deps.h"
#include "server/status.h"

namespace kernelserve::server {

// How much one stream keeps in the server before it stops reading requests. gRPC writes an
// answer only as fast as the client reads (HTTP/2 flow control); without a bound, a client that
// sends and does not read has the server queue every answer, without end. A stream that stops
// reading leaves the next requests in gRPC's buffers, whose flow control then stops the
// client's writes; it reads again as its answers are written.
// - Bytes: what its items in work hold in the in-flight budget and its answers waiting to be
//   written, at most a quarter of --max-inflight-bytes (at least kMinStreamBytes): one stream
//   alone never takes more than that share, so other callers keep the rest, while a client
//   that reads still has an answer being written and the next ones in work.
// - Items: read and not yet written, at most kMaxStreamItems: deep enough to keep every lane of
//   several GPUs busy with small calls, and it bounds what a stream of tiny answers that nobody
//   reads keeps outside the budget (gRPC's and the queue's own overhead per answer).
inline constexpr int kMaxStreamItems = 64;
inline constexpr int64_t kMinStreamBytes = int64_t{64} << 20;
inline constexpr int64_t kStreamBudgetShare = 4;

// Protocol provides the stream's front door, around the pipeline's Prepare and Run:
//   struct Reply: what an answer needs of its request (a value type; default = nothing known).
//   static absl::Status Parse(const CallDeps&, const Caller&, grpc::ByteBuffer* read,
//                             CallRequest*, Reply*): the request as the native one, into
//       *call->request (its large tensor bytes into *call->buffers), with its region refs and
//       the outputs it asks for.
//   static std::chrono::system_clock::time_point Deadline(const Reply&): the item's own
//       deadline besides the stream's.
//   static constexpr bool kKeepBuffers: outputs may stay in page-locked buffers (Serialize
//       sends them from there); else they are copied into the response.
//   static absl::Status Serialize(v1::ExecuteResponse, wire::TensorBuffers, const absl::Status&
//       outcome, const Reply&, CallWaits, grpc::ByteBuffer* out): the answer's bytes, an
//       in-band error when `outcome` is not OK; returns `outcome`, or Internal (with the error
//       in `out`) when the answer could not be serialized.
// Each item holds its bytes in the in-flight budget while it is in work, and its answer's bytes
// until gRPC has written it (OnWriteDone); the stream stops reading past the bounds above.
// Thread safety: gRPC calls the reactions one at a time; worker threads call Answer. Both take
// mu_ for the stream's state.
template <typename Protocol>
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `deps` must outlive the stream.
  StreamReactor(const ServiceDeps* deps, grpc::CallbackServerContext* context)
      : deps_(deps),
        context_(context),
        max_bytes_(std::max(kMinStreamBytes, deps->budget->max_bytes() / kStreamBudgetShare)) {
    absl::StatusOr<Admitted> admitted = Admit(*deps_, *context_);
    if (!admitted.ok()) {
      Finish(ToGrpcStatus(admitted.status()));
      return;
    }
    caller_ = std::move(admitted->caller);
    tenant_ = std::move(admitted->tenant);
    StartRead(&read_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = ShouldFinishLocked();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    Handle();
    read_.Clear();
    {
      absl::MutexLock lock(&mu_);
      paused_ = FullLocked();
      if (paused_) return;  // OnWriteDone reads again
    }
    StartRead(&read_);
  }

  void OnWriteDone(bool /*ok*/) override {
    // A failed write means the client is gone; the remaining answers are dropped the same way
    // (each write fails at once), and each gives its bytes back.
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    bool resume = false;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= writes_.front().hold.bytes();
      writes_.pop_front();  // its hold gives the bytes back
      if (!writes_.empty()) {
        next = &writes_.front().buffer;
      } else {
        writing_ = false;
        finish = ShouldFinishLocked();
      }
      resume = paused_ && !FullLocked();
      if (resume) paused_ = false;
    }
    if (next != nullptr) StartWrite(next);
    if (resume) StartRead(&read_);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  using Reply = typename Protocol::Reply;

  // An answer queued to be written, with its bytes held in the budget.
  struct Queued {
    grpc::ByteBuffer buffer;
    AnswerHold hold;
  };

  // Admits, parses and prepares read_ and hands it to a worker; answers in-band when it cannot.
  void Handle() {
    auto tracker = std::make_shared<CallTracker>(deps_->budget, deps_->metrics, context_);
    tracker->set_caller(caller_, tenant_);
    Reply reply;
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    int64_t counted = 0;  // of the tracker's bytes, those in pending_bytes_
    absl::Status status = RunGuarded([&]() -> absl::Status {
      const auto bytes = static_cast<int64_t>(read_.Length());
      deps_->metrics->Received(bytes);
      // Each item is a call of its own under the identity's request rate (the stream's
      // opening took the first).
      if (tenant_ != nullptr && items_++ > 0) {
        KS_RETURN_IF_ERROR(AdmitItem(*tenant_, *deps_->metrics));
      }
      KS_RETURN_IF_ERROR(tracker->Hold(bytes, "request"));
      v1::ExecuteRequest request;
      wire::TensorBuffers request_buffers;
      CallRequest parsed{
          .request = &request, .buffers = &request_buffers, .regions = {}, .outputs = {}};
      const auto parse_started = std::chrono::steady_clock::now();
      KS_RETURN_IF_ERROR(Protocol::Parse(*deps_, caller_, &read_, &parsed, &reply));
      const int64_t recv_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - parse_started)
                                  .count();
      KS_ASSIGN_OR_RETURN(PreparedCall prepared, Prepare(*deps_, parsed, *tracker));
      counted = tracker->held_bytes();
      {
        absl::MutexLock lock(&mu_);
        pending_bytes_ += counted;
      }
      const int worker = prepared.plan.ordinal();
      return Dispatch(
          *deps_->pool, context_, worker,
          [this, reply, tracker, recv_us, counted, prepared = std::move(prepared)](
              absl::Status status, int64_t queue_us) {
            RunItem(prepared, reply, *tracker, std::move(status), {queue_us, recv_us}, counted);
          },
          /*may_run_inline=*/false, Protocol::Deadline(reply));
    });
    if (!status.ok()) Answer(v1::ExecuteResponse(), {}, status, reply, {}, *tracker, counted);
  }

  // The worker's part of one item: run it (unless `status` says it was dropped) and answer.
  void RunItem(const PreparedCall& call, const Reply& reply, CallTracker& tracker,
               absl::Status status, CallWaits waits, int64_t counted) {
    v1::ExecuteResponse response;
    wire::TensorBuffers buffers;
    status = Run(*deps_, call, std::move(status), waits, tracker, &response,
                 Protocol::kKeepBuffers ? &buffers : nullptr);
    Answer(std::move(response), std::move(buffers), status, reply, waits, tracker, counted);
  }

  // Completes one pending request: records it and queues its answer, whose bytes stay in the
  // budget in place of the item's (`counted` of them in pending_bytes_) until it is written.
  void Answer(v1::ExecuteResponse response, wire::TensorBuffers buffers, const absl::Status& status,
              const Reply& reply, CallWaits waits, CallTracker& tracker, int64_t counted) {
    absl::Status outcome = tracker.Outcome(status);
    Queued answer;
    outcome = Protocol::Serialize(std::move(response), std::move(buffers), outcome, reply, waits,
                                  &answer.buffer);
    const auto bytes = static_cast<int64_t>(answer.buffer.Length());
    answer.hold = tracker.KeepForAnswer(bytes);
    tracker.Record(outcome, bytes);
    const grpc::ByteBuffer* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      pending_bytes_ -= counted;
      queued_bytes_ += bytes;
      writes_.push_back(std::move(answer));
      if (!writing_) {
        writing_ = true;
        write = &writes_.back().buffer;
      }
    }
    if (write != nullptr) StartWrite(write);
  }

  // True when the stream holds as much as it may (see kMaxStreamItems): it stops reading.
  bool FullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_ + static_cast<int64_t>(writes_.size()) >= kMaxStreamItems ||
           pending_bytes_ + queued_bytes_ >= max_bytes_;
  }

  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  const ServiceDeps* const deps_;
  grpc::CallbackServerContext* const context_;
  const int64_t max_bytes_;         // of items in work and answers queued, before reading stops
  Caller caller_;                   // authenticated once, for every item of the stream
  std::shared_ptr<Tenant> tenant_;  // its identity's quotas (null = none)
  int64_t items_ = 0;               // requests read; touched only by the reactions
  grpc::ByteBuffer read_;           // the read in progress; touched only by the reactions
  absl::Mutex mu_;
  std::deque<Queued> writes_ ABSL_GUARDED_BY(mu_);  // front = being written
  int pending_ ABSL_GUARDED_BY(mu_) = 0;            // requests read and not yet answered
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // what they hold in the budget
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;   // bytes of writes_
  bool paused_ ABSL_GUARDED_BY(mu_) = false;        // no read started: the stream is full
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_STREAM_REACTOR_H_
