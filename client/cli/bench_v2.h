// `kernelserve bench --protocol=v2`: the bench's request as a KServe v2 (Open Inference
// Protocol) ModelInferRequest, and the server's timings from its answer.
#ifndef KERNELSERVE_CLIENT_CLI_BENCH_V2_H_
#define KERNELSERVE_CLIENT_CLI_BENCH_V2_H_

#include "absl/status/statusor.h"
#include "client/cli/bench.h"
#include "client/client.h"
#include "inference/grpc_service.pb.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::cli {

// The ModelInferRequest of the same call as `request`: model = kernel, each input with its
// datatype, shape and bytes (raw_input_contents, in input order), `parameters` as typed
// parameters. InvalidArgument naming the flag for what the front door does not take: an
// explicit config (--config), a tuning policy (--autotune), a platform or device, a kernel id
// (NAME@VERSION) rather than a bare kernel name.
absl::StatusOr<inference::ModelInferRequest> ToModelInfer(const v1::ExecuteRequest& request);

// The server's timings of a ModelInfer answer (its *_us parameters; 0 for those absent).
ServerTimings TimingsOf(const inference::ModelInferResponse& response);

// RunBench of Client::ModelInfer of ToModelInfer(request): the same load as the native
// RunBench, each call through the KServe v2 front door on the client's channel (its token,
// TLS and deadline). A failed ModelInfer counts as a failed call, as a failed Execute does.
// ToModelInfer's error when the request does not convert.
absl::StatusOr<BenchReport> RunBenchV2(const Client& client, const v1::ExecuteRequest& request,
                                       const BenchOptions& options);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_BENCH_V2_H_
