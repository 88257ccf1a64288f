// Calls to the server with raw bytes (any bytes, parseable or not), for the tests of what the
// server does with requests that no stub would send.
#ifndef KERNELSERVE_TESTS_SERVER_RAW_CALLS_H_
#define KERNELSERVE_TESTS_SERVER_RAW_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

namespace kernelserve::testing {

// The outcome of a raw call: its status and the response messages' bytes.
struct RawResult {
  grpc::Status status;
  std::vector<std::string> responses;
};

// A unary call of `method` ("/kernelserve.v1.KernelService/Execute") with `request` as the
// message bytes, on `channel` (a fresh channel per call when null). 20 s deadline.
RawResult RawUnary(const std::string& address, const std::string& method,
                   const std::string& request, std::shared_ptr<grpc::Channel> channel = nullptr);

// A bidirectional stream of `method`: writes every message of `requests`, half-closes, then
// reads every answer until the server ends the stream. 20 s deadline.
RawResult RawStream(const std::string& address, const std::string& method,
                    const std::vector<std::string>& requests);

// `message` serialized.
template <typename Message>
std::string Bytes(const Message& message) {
  return message.SerializeAsString();
}

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SERVER_RAW_CALLS_H_
