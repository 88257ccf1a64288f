#include "tests/server/raw_calls.h"

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <future>
#include <memory>

namespace kernelserve::testing {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Valid() || !buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(20);
}

// Waits for the next event of `cq`; false when the operation failed.
bool Await(grpc::CompletionQueue& cq) {
  void* tag = nullptr;
  bool ok = false;
  return cq.Next(&tag, &ok) && ok;
}

}  // namespace

RawResult RawUnary(const std::string& address, const std::string& method,
                   const std::string& request, std::shared_ptr<grpc::Channel> channel) {
  grpc::GenericStub stub(channel != nullptr ? channel : Channel(address));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  grpc::ByteBuffer request_buffer = Buffer(request);
  grpc::ByteBuffer response_buffer;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request_buffer, &response_buffer,
                 [&done](grpc::Status s) { done.set_value(s); });
  RawResult result;
  result.status = done.get_future().get();
  if (result.status.ok()) result.responses.push_back(Flatten(response_buffer));
  return result;
}

RawResult RawStream(const std::string& address, const std::string& method,
                    const std::vector<std::string>& requests) {
  grpc::GenericStub stub(Channel(address));
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  RawResult result;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  call->StartCall(nullptr);
  bool open = Await(cq);
  for (const std::string& request : requests) {
    if (!open) break;
    call->Write(Buffer(request), nullptr);
    open = Await(cq);
  }
  if (open) {
    call->WritesDone(nullptr);
    Await(cq);
  }
  while (true) {
    grpc::ByteBuffer response;
    call->Read(&response, nullptr);
    if (!Await(cq)) break;
    result.responses.push_back(Flatten(response));
  }
  call->Finish(&result.status, nullptr);
  Await(cq);
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return result;
}

}  // namespace kernelserve::testing
