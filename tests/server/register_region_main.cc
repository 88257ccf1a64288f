// kernelserve-test-register: registers one system shared-memory region with a server and exits
// with the call's gRPC status code (its message on stderr), so that a test can make the call as
// another user.
//
//   kernelserve-test-register TARGET NAME KEY BYTE_SIZE
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "proto/kernel_service_grpc.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s TARGET NAME KEY BYTE_SIZE\n", argv[0]);
    return 2;
  }
  auto stub = kernelserve::v1::KernelService::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  kernelserve::v1::RegisterSystemSharedMemoryRequest request;
  request.set_name(argv[2]);
  request.set_key(argv[3]);
  request.set_byte_size(std::strtoull(argv[4], nullptr, 10));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  kernelserve::v1::RegisterSharedMemoryResponse response;
  const grpc::Status status = stub->RegisterSystemSharedMemory(&context, request, &response);
  std::fprintf(stderr, "%d %s\n", static_cast<int>(status.error_code()),
               status.error_message().c_str());
  return static_cast<int>(status.error_code());
}
