// kernelserve-grpc-floor: the gRPC floor of a call on this machine, for bench/service_bench.py.
//
//   kernelserve-grpc-floor --listen 127.0.0.1:50300
//
// A bare KernelService on the same gRPC callback API, process settings and message sizes as
// kernelserve-server, doing none of its work: Execute answers a mean_pooling request with an
// `out` tensor of the answer's shape and size ([B,H] or [N,H]) filled with x's first bytes, a
// flash_attention request (one with `q`) with `out` = q (dtype and shape alone when the request
// has `out` written elsewhere, output_regions), and a heuristic config; every other
// method is unimplemented. The same bytes cross gRPC both ways as with kernelserve-server.
// `kernelserve bench` runs against it unchanged, so its latency is what gRPC itself costs here, and
// kernelserve-server's latency minus it is what the server adds (docs/PERFORMANCE.md, small calls
// against the gRPC floor).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/dtype.h"
#include "proto/convert.h"
#include "proto/kernel_service_grpc.h"
#include "server/process_tuning.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50300", "address to listen on");

namespace {

namespace v1 = kernelserve::v1;

// Answers Execute with a mean_pooling-sized answer and nothing else. Thread-safe (stateless).
class FloorService final : public v1::KernelService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context,
                                    const v1::ExecuteRequest* request,
                                    v1::ExecuteResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const grpc::Status status = request->inputs().contains("q")
                                    ? AnswerAttention(*request, response)
                                    : AnswerPooling(*request, response);
    if (status.ok()) {
      response->mutable_config()->set_platform("cpu");
      response->set_config_source(v1::CONFIG_SOURCE_HEURISTIC);
      response->set_platform("cpu");
      response->set_device(-1);
      response->set_request_id(request->request_id());
    }
    reactor->Finish(status);
    return reactor;
  }

 private:
  // mean_pooling's answer: [B,H], or [N,H] for N sequences, filled with x's first bytes.
  static grpc::Status AnswerPooling(const v1::ExecuteRequest& request,
                                    v1::ExecuteResponse* response) {
    const auto& inputs = request.inputs();
    auto x = inputs.find("x");
    auto cu = inputs.find("cu_seqlens");
    const int rank = x == inputs.end() ? 0 : x->second.shape_size();
    if (!(rank == 3 || (rank == 2 && cu != inputs.end() && cu->second.shape_size() == 1))) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "expected x [B,S,H], or x [T,H] with cu_seqlens [N+1], or q");
    }
    const v1::Tensor& in = x->second;
    const int64_t rows = rank == 3 ? in.shape(0) : cu->second.shape(0) - 1;
    const int64_t hidden = in.shape(rank - 1);
    absl::StatusOr<kernelserve::DType> dtype = kernelserve::FromProto(in.dtype(), "x");
    const size_t bytes =
        dtype.ok() ? static_cast<size_t>(rows * hidden) * kernelserve::ItemSize(*dtype) : 0;
    if (!dtype.ok() || rows < 0 || bytes > in.data().size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "x holds fewer bytes than the answer needs");
    }
    v1::Tensor& out = (*response->mutable_outputs())["out"];
    out.set_dtype(in.dtype());
    out.add_shape(rows);
    out.add_shape(hidden);
    out.set_data(in.data().substr(0, bytes));
    return grpc::Status::OK;
  }

  // flash_attention's answer: `out` of q's dtype, shape and bytes (an echo of q).
  static grpc::Status AnswerAttention(const v1::ExecuteRequest& request,
                                      v1::ExecuteResponse* response) {
    const v1::Tensor& q = request.inputs().at("q");
    v1::Tensor& out = (*response->mutable_outputs())["out"];
    out.set_dtype(q.dtype());
    *out.mutable_shape() = q.shape();
    // An output the server writes into a region or resident tensor comes back without bytes.
    if (!request.output_regions().contains("out")) out.set_data(q.data());
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  kernelserve::TuneProcess();  // as kernelserve-server does
  absl::ParseCommandLine(argc, argv);
  FloorService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.SetMaxSendMessageSize(1 << 30);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "kernelserve-grpc-floor: cannot listen on %s\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  std::printf("kernelserve-grpc-floor: listening on port %d\n", port);
  std::fflush(stdout);
  server->Wait();  // until killed
  return 0;
}
