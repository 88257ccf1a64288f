// ExecuteStream: a bidirectional stream of Execute calls. Each request goes to a worker as it
// arrives; each answer (result or in-band error) is written when ready, echoing request_id. An
// item that does not parse is answered in-band with INVALID_ARGUMENT and the stream goes on.
#include <chrono>
#include <deque>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/parse.h"
#include "server/service.h"
#include "server/status.h"

namespace kernelserve::server {

// Thread safety: gRPC calls the reactions one at a time; worker threads call Answer, which
// takes mu_.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(KernelServiceImpl* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    if (absl::Status auth = service_->Authorize(*context_); !auth.ok()) {
      Finish(ToGrpcStatus(auth));
      return;
    }
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
    StartRead(&read_);
  }

  void OnWriteDone(bool /*ok*/) override {
    // A failed write means the client is gone; the remaining answers are dropped the same way.
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writes_.pop_front();
      if (!writes_.empty()) {
        next = &writes_.front();
      } else {
        writing_ = false;
        finish = ShouldFinishLocked();
      }
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  // Parses and plans read_ and hands it to a worker; answers in-band when it cannot.
  void Handle() {
    const KernelServiceImpl& service = *service_;
    auto tracker =
        std::make_shared<CallTracker>(service.deps_.budget, service.deps_.metrics, context_);
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    absl::Status status = RunGuarded([&]() -> absl::Status {
      const auto bytes = static_cast<int64_t>(read_.Length());
      service.deps_.metrics->Received(bytes);
      KS_RETURN_IF_ERROR(tracker->Hold(bytes, "request"));
      v1::ExecuteRequest request;
      wire::TensorBuffers request_buffers;
      const auto parse_started = std::chrono::steady_clock::now();
      KS_RETURN_IF_ERROR(
          wire::ParseRequest(&read_, &request, service.deps_.host_allocator, &request_buffers));
      const int64_t recv_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - parse_started)
                                  .count();
      id = request.request_id();
      KS_ASSIGN_OR_RETURN(CallPlan plan, service.PlanRequest(request, *tracker));
      KS_ASSIGN_OR_RETURN(TensorMap inputs,
                          TakeTensors(request.mutable_inputs(), &request_buffers));
      KS_RETURN_IF_ERROR(tracker->Hold(OutputBytes(plan), "outputs"));
      const int worker = plan.ordinal();
      return service.Dispatch(
          context_, worker,
          [this, id, tracker, recv_us, plan = std::move(plan), inputs = std::move(inputs)](
              absl::Status status, int64_t queue_us) {
            RunItem(plan, inputs, id, *tracker, std::move(status), {queue_us, recv_us});
          });
    });
    if (!status.ok()) Answer(v1::ExecuteResponse(), {}, status, id, {}, *tracker);
  }

  // The times of an item spent outside its run.
  struct Waits {
    int64_t queue_us = 0;
    int64_t recv_us = 0;
  };

  // The worker's part of one item: run it (unless `status` says it was dropped) and answer.
  void RunItem(const CallPlan& plan, const TensorMap& inputs, const std::string& id,
               CallTracker& tracker, absl::Status status, Waits waits) {
    v1::ExecuteResponse response;
    wire::TensorBuffers buffers;
    if (status.ok()) {
      status =
          RunGuarded([&] { return RunCall(service_->deps_, plan, inputs, &response, &buffers); });
    }
    Answer(std::move(response), std::move(buffers), status, id, waits, tracker);
  }

  // Completes one pending request: records it and queues its answer (with the output bytes
  // that `buffers` holds, sent from there).
  void Answer(v1::ExecuteResponse response, wire::TensorBuffers buffers, const absl::Status& status,
              const std::string& id, Waits waits, CallTracker& tracker) {
    absl::Status outcome = tracker.Outcome(status);
    tracker.ReleaseHold();
    if (!outcome.ok()) {
      response.Clear();
      buffers.clear();
      ToRpcStatus(outcome, response.mutable_status());
    }
    response.set_request_id(id);
    response.mutable_timing()->set_queue_us(waits.queue_us);
    response.mutable_timing()->set_recv_us(waits.recv_us);
    grpc::ByteBuffer buffer;
    bool own_buffer = false;
    const grpc::Status serialized = buffers.empty()
                                        ? grpc::SerializationTraits<v1::ExecuteResponse>::Serialize(
                                              response, &buffer, &own_buffer)
                                        : wire::SerializeResponse(response, buffers, &buffer);
    if (!serialized.ok()) {
      outcome = absl::InternalError(
          absl::StrCat("serializing the response: ", serialized.error_message()));
      v1::ExecuteResponse failed;
      failed.set_request_id(id);
      ToRpcStatus(outcome, failed.mutable_status());
      (void)grpc::SerializationTraits<v1::ExecuteResponse>::Serialize(failed, &buffer, &own_buffer);
    }
    tracker.Record(outcome, static_cast<int64_t>(buffer.Length()));
    const grpc::ByteBuffer* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      writes_.push_back(std::move(buffer));
      if (!writing_) {
        writing_ = true;
        write = &writes_.back();
      }
    }
    if (write != nullptr) StartWrite(write);
  }

  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  KernelServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer read_;  // the read in progress; touched only by the reactions
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);  // front = being written
  int pending_ ABSL_GUARDED_BY(mu_) = 0;                      // requests read and not yet answered
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KernelServiceImpl::ExecuteStream(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(this, context);
}

}  // namespace kernelserve::server
