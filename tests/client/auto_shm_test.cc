#include "client/cli/auto_shm.h"

#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

TEST(IsLocalTargetTest, LoopbackAndUnixSocketsAreLocal) {
  for (const char* target :
       {"unix:/tmp/ks.sock", "unix:///tmp/ks.sock", "unix-abstract:ks", "127.0.0.1:50051",
        "127.0.0.1", "127.1.2.3:80", "localhost:50051", "localhost", "[::1]:50051", "[::1]",
        "dns:///localhost:50051", "dns:localhost:50051", "dns://8.8.8.8/127.0.0.1:1",
        "ipv4:127.0.0.1:50051", "ipv6:[::1]:50051"}) {
    EXPECT_TRUE(IsLocalTarget(target)) << target;
  }
}

TEST(IsLocalTargetTest, OtherHostsAreNot) {
  for (const char* target :
       {"10.0.0.5:50051", "gpu-box:50051", "example.com", "127.example.com:50051",
        "localhost.example.com:1", "[::2]:50051", "[::1", "dns:///gpu-box:50051", "dns://x",
        "ipv4:10.0.0.1:1", "", "128.0.0.1:1"}) {
    EXPECT_FALSE(IsLocalTarget(target)) << target;
  }
}

Args WithSharedMemory(const std::string& value) {
  Args args;
  args.positional = {"run", "mean_pooling"};
  if (!value.empty()) args.flags["shared-memory"] = {value};
  return args;
}

TEST(SharedMemoryModeTest, AutoIsTheDefaultNoneAndOffOptOut) {
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory(""), false), SharedMemoryMode::kAuto);
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory("auto"), false), SharedMemoryMode::kAuto);
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory("none"), false), SharedMemoryMode::kNone);
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory("off"), true), SharedMemoryMode::kNone);
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory("system"), false),
            SharedMemoryMode::kSystem);
  EXPECT_EQ(*SharedMemoryModeFromArgs(WithSharedMemory("cuda"), true), SharedMemoryMode::kCuda);
}

TEST(SharedMemoryModeTest, OthersNameTheAcceptedValues) {
  absl::StatusOr<SharedMemoryMode> cuda = SharedMemoryModeFromArgs(WithSharedMemory("cuda"), false);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda.status().message(), "--shared-memory=cuda: expected auto, none, or system");
  absl::StatusOr<SharedMemoryMode> gpu = SharedMemoryModeFromArgs(WithSharedMemory("gpu"), true);
  EXPECT_EQ(gpu.status().message(), "--shared-memory=gpu: expected auto, none, system or cuda");
}

TEST(InlineInputBytesTest, CountsTheBytesInTheMessageOnly) {
  v1::ExecuteRequest request;
  (*request.mutable_inputs())["x"].set_data(std::string(1000, 'x'));
  (*request.mutable_inputs())["mask"].set_data(std::string(24, 'm'));
  (*request.mutable_inputs())["k"].mutable_ref()->set_tensor("resident-k");
  EXPECT_EQ(InlineInputBytes(request), 1024u);
  EXPECT_EQ(InlineInputBytes(v1::ExecuteRequest()), 0u);
}

TEST(SharedMemoryFallbackTest, IsOneLineNamingTheRefusalAndTheOptOut) {
  std::ostringstream err;
  NoteSharedMemoryFallback(absl::ResourceExhaustedError("past --max-shared-memory-bytes\n(64 KiB)"),
                           err);
  EXPECT_EQ(err.str(),
            "kernelserve: note: the server refused a shared-memory region (RESOURCE_EXHAUSTED: "
            "past --max-shared-memory-bytes (64 KiB)); sending the tensors in the message instead "
            "(--shared-memory=none skips trying)\n");
}

}  // namespace
}  // namespace kernelserve::cli
