// AutotuneStreamCall: one AutotuneStream RPC (server streaming) on raw bytes, from arrival to its
// last message: Autotune's call (the same steps, server/service.cc) that also writes where the
// tuning stands as it goes.
#ifndef KERNELSERVE_SERVER_AUTOTUNE_STREAM_H_
#define KERNELSERVE_SERVER_AUTOTUNE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/tuner.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/parse.h"
#include "server/call_tracker.h"

namespace kernelserve::server {

// The reactor of one AutotuneStream, and the call (its tracker, request and response) that
// Autotune's steps run, as they run a UnaryCall. Progress messages are written one at a time, as
// fast as the client reads: one that comes while another is being written waits in its place,
// and a newer one replaces it (the client gets the latest, never an older after a newer). The
// last message carries the response and ends the stream; an error ends it with that status
// alone. gRPC deletes the reactor once it is done (OnDone).
// Thread safety: the handler, then the worker that runs the call, call Parse, request(),
// response(), Progress and Finish one at a time; gRPC's OnWriteDone comes from its threads.
// mu_ guards what both touch.
class AutotuneStreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Borrows everything; gRPC keeps `context` and `raw_request` until the call is done. `budget`
  // and `metrics` must outlive it.
  AutotuneStreamCall(InflightBudget* budget, Metrics* metrics, grpc::CallbackServerContext* context,
                     const grpc::ByteBuffer* raw_request);
  AutotuneStreamCall(const AutotuneStreamCall&) = delete;
  AutotuneStreamCall& operator=(const AutotuneStreamCall&) = delete;

  // Bytes received (before parsing).
  int64_t received_bytes() const { return received_bytes_; }
  // Parses the received bytes into request(); InvalidArgument naming the fault.
  absl::Status Parse(HostAllocator* allocator = nullptr);

  // Writes where the tuning stands (or keeps it to write next, see above).
  void Progress(const TuneProgress& progress);
  // The status the client sees, recorded, then: OK = the last message (the response) written
  // and the stream finished OK; else the stream finished with it. The caller must not touch the
  // call after.
  void Finish(const absl::Status& status);

  v1::AutotuneRequest& request() { return request_; }
  v1::AutotuneResponse& response() { return response_; }
  CallTracker& tracker() { return tracker_; }

  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  ~AutotuneStreamCall() override = default;

  // What to do next, decided under mu_ and done outside it: write a message, finish, or
  // neither.
  struct Action {
    const grpc::ByteBuffer* write = nullptr;
    std::optional<grpc::Status> finish;
  };
  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Take(const Action& action);

  CallTracker tracker_;
  grpc::ByteBuffer* const raw_request_;
  const int64_t received_bytes_;
  v1::AutotuneRequest request_;
  v1::AutotuneResponse response_;
  int32_t done_ = 0;  // candidates done in the last progress; touched by the worker only

  absl::Mutex mu_;
  grpc::ByteBuffer writing_buffer_ ABSL_GUARDED_BY(mu_);  // the message being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::ByteBuffer> next_progress_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::ByteBuffer> last_ ABSL_GUARDED_BY(mu_);  // the response's message
  std::optional<grpc::Status> final_ ABSL_GUARDED_BY(mu_);     // set by Finish
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_AUTOTUNE_STREAM_H_
