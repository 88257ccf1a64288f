// ExecuteStream: a bidirectional stream of Execute calls. Each request goes to a worker as it
// arrives; each answer (result or in-band error) is written when ready, echoing request_id.
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/service.h"
#include "server/status.h"

namespace kernelserve::server {

// Thread safety: gRPC calls the reactions one at a time; worker threads call Respond, which
// takes mu_.
class StreamReactor final
    : public grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse> {
 public:
  StreamReactor(KernelServiceImpl* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    if (absl::Status auth = service_->Authorize(*context_); !auth.ok()) {
      Finish(ToGrpcStatus(auth));
      return;
    }
    StartRead(&request_);
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
    request_.Clear();
    StartRead(&request_);
  }

  void OnWriteDone(bool /*ok*/) override {
    // A failed write means the client is gone; the remaining answers are dropped the same way.
    const v1::ExecuteResponse* next = nullptr;
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
  using Clock = std::chrono::steady_clock;

  // Plans request_ and hands it to a worker; answers in-band when it cannot.
  void Handle() {
    const Clock::time_point start = Clock::now();
    Metrics& metrics = *service_->deps_.metrics;
    metrics.Received(static_cast<int64_t>(request_.ByteSizeLong()));
    const std::string id = request_.request_id();
    std::string kernel = "unknown";
    std::string platform = "unknown";
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    absl::Status status = [&]() -> absl::Status {
      const ServiceDeps& deps = service_->deps_;
      KS_ASSIGN_OR_RETURN(PlannedCall call,
                          PlanCall(*deps.executor, *deps.pool, ParamsOf(request_)));
      kernel = call.kernel->name();
      platform = call.platform;
      if (IsSet(request_.config())) call.options.config = FromProto(request_.config());
      KS_ASSIGN_OR_RETURN(TensorMap inputs, TakeTensors(request_.mutable_inputs()));
      const int64_t bytes = TensorBytes(inputs);
      const int worker = call.worker;
      return service_->Dispatch(
          context_, worker, bytes,
          [this, id, start, call = std::move(call), inputs = std::move(inputs)](absl::Status status,
                                                                                int64_t queue_us) {
            v1::ExecuteResponse response;
            if (status.ok()) status = RunCall(service_->deps_, call, inputs, &response);
            Answer(std::move(response), status, id, queue_us, call.kernel->name(), call.platform,
                   start);
          });
    }();
    if (!status.ok()) Answer(v1::ExecuteResponse(), status, id, 0, kernel, platform, start);
  }

  // Completes one pending request: records it and queues its answer.
  void Answer(v1::ExecuteResponse response, const absl::Status& status, const std::string& id,
              int64_t queue_us, std::string_view kernel, std::string_view platform,
              Clock::time_point start) {
    if (!status.ok()) {
      response.Clear();
      response.mutable_status()->set_code(status.raw_code());
      response.mutable_status()->set_message(std::string(status.message()));
    }
    response.set_request_id(id);
    response.mutable_timing()->set_queue_us(queue_us);
    Metrics& metrics = *service_->deps_.metrics;
    metrics.Request(kernel, platform, absl::StatusCodeToString(status.code()),
                    std::chrono::duration<double>(Clock::now() - start).count());
    metrics.Sent(static_cast<int64_t>(response.ByteSizeLong()));
    const v1::ExecuteResponse* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      writes_.push_back(std::move(response));
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
  v1::ExecuteRequest request_;  // the read in progress; touched only by the reactions
  absl::Mutex mu_;
  std::deque<v1::ExecuteResponse> writes_ ABSL_GUARDED_BY(mu_);  // front = being written
  int pending_ ABSL_GUARDED_BY(mu_) = 0;  // requests read and not yet answered
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>* KernelServiceImpl::ExecuteStream(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(this, context);
}

}  // namespace kernelserve::server
