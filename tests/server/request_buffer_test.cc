// What the zero-copy request path assumes of gRPC. The service's methods are registered raw
// (server/service.h), and UnaryCall (server/unary_call.h) casts the const off the request
// buffer gRPC hands the handler, so that parsing (wire::ParseRequest) can clear it and the
// received bytes are freed as soon as they are parsed, before the call runs. That is safe, and
// worth doing, only while gRPC gives each call a request buffer of its own, which holds the only
// reference to the received bytes, and which gRPC itself does not read again (it destroys it
// after the call). These tests pin that down on the gRPC this project links, with the same
// generated raw method the server registers:
// - clearing the handler's buffer frees the received bytes: were gRPC to keep a reference of
//   its own to them (a buffer shared with the transport, or the handler given a view of one
//   gRPC still holds), nothing would be freed and ClearingTheBufferFreesTheReceivedBytes fails;
// - the next call's buffer is whole: were gRPC to hand calls one buffer, or keep using the one
//   a handler cleared, a later call would see it empty and EachCallGetsAWholeBufferOfItsOwn
//   fails (and the call after a cleared one must still succeed).
#include <grpcpp/grpcpp.h>
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "proto/kernel_service_grpc.h"

namespace kernelserve {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Bytes glibc malloc has handed out and not had back (heap and mmapped blocks).
int64_t MallocInUse() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

bool MallocIsGlibcs() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return false;
#else
  return true;
#endif
#else
  return true;
#endif
}

// What the Execute handler saw of one call.
struct Seen {
  size_t received = 0;      // bytes in the buffer when the handler got it
  size_t left = 0;          // after clearing it
  int64_t freed_bytes = 0;  // malloc's bytes in use before the clear, less after
};

// Execute registered raw, as the server registers it; the handler clears the request buffer the
// way UnaryCall and wire::ParseRequest do, and answers an empty response.
class ClearingService final
    : public v1::KernelService::WithRawCallbackMethod_Execute<v1::KernelService::Service> {
 public:
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    Seen seen;
    seen.received = request->Length();
    const int64_t before = MallocInUse();
    const_cast<grpc::ByteBuffer*>(request)->Clear();  // server/unary_call.h's assumption
    seen.freed_bytes = before - MallocInUse();
    seen.left = request->Length();
    {
      absl::MutexLock lock(&mu_);
      seen_.push_back(seen);
    }
    grpc::Slice empty;  // the empty ExecuteResponse
    *response = grpc::ByteBuffer(&empty, 1);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::vector<Seen> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
};

class RequestBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(256 * kMiB);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 * kMiB);
    stub_ = v1::KernelService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  }
  void TearDown() override { server_->Shutdown(); }

  // Sends an Execute with one input of `bytes` bytes; the handler's status.
  grpc::Status Send(size_t bytes) {
    v1::ExecuteRequest request;
    request.set_kernel("mean_pooling");
    v1::Tensor& x = (*request.mutable_inputs())["x"];
    x.set_dtype(v1::DTYPE_F32);
    x.add_shape(static_cast<int64_t>(bytes / 4));
    x.mutable_data()->assign(bytes, '\x5a');
    sent_bytes_ = request.ByteSizeLong();
    grpc::ClientContext context;
    v1::ExecuteResponse response;
    return stub_->Execute(&context, request, &response);
  }

  ClearingService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
  size_t sent_bytes_ = 0;
};

TEST_F(RequestBufferTest, ClearingTheBufferFreesTheReceivedBytes) {
  if (!MallocIsGlibcs()) GTEST_SKIP() << "the sanitizer's allocator does not keep glibc's counts";
  constexpr size_t kBytes = 64 * kMiB;
  ASSERT_TRUE(Send(kBytes).ok());
  const std::vector<Seen> seen = service_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].received, sent_bytes_);
  EXPECT_EQ(seen[0].left, 0u);
  // All of it but what other threads allocated meanwhile; half is far from both.
  EXPECT_GE(seen[0].freed_bytes, static_cast<int64_t>(kBytes / 2))
      << "clearing the handler's request buffer freed " << seen[0].freed_bytes << " of " << kBytes
      << " received bytes: gRPC keeps a reference of its own to them";
}

TEST_F(RequestBufferTest, EachCallGetsAWholeBufferOfItsOwn) {
  for (size_t bytes : {4 * kMiB, 8 * kMiB, 1024ul}) {
    ASSERT_TRUE(Send(bytes).ok()) << bytes;
    const Seen seen = service_.seen().back();
    EXPECT_EQ(seen.received, sent_bytes_) << "a later call's buffer is not whole";
    EXPECT_EQ(seen.left, 0u);
  }
  EXPECT_EQ(service_.seen().size(), 3u);
}

}  // namespace
}  // namespace kernelserve
