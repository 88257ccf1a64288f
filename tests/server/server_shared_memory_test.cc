// kernelserve.v1's shared memory over the kernelserve-server binary: a system region
// registered once, inputs read from it and outputs written into it, equal to inline calls bit
// for bit; every bad reference and registration with its code; the flag that turns it off; what
// one identity sees of its regions (owner, Unregister of "" keeping to it), regions kept apart
// between the identities of a token file, the caps, the rules for names and keys, objects
// shrunk under the server, the calls counted in use.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

class SharedMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    absl::Status started = server_->Start({"--cache=memory"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }
  void TearDown() override {
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryResponse response;
    EXPECT_TRUE(stub_->UnregisterSharedMemory(&context, {}, &response).ok());
  }

  grpc::Status Register(const std::string& name, const ShmObject& object, uint64_t offset,
                        uint64_t bytes) {
    return RegisterKey(name, object.key(), offset, bytes);
  }
  grpc::Status RegisterKey(const std::string& name, const std::string& key, uint64_t offset,
                           uint64_t bytes) {
    grpc::ClientContext context;
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(key);
    request.set_offset(offset);
    request.set_byte_size(bytes);
    v1::RegisterSharedMemoryResponse response;
    return stub_->RegisterSystemSharedMemory(&context, request, &response);
  }
  v1::SharedMemoryStatusResponse Status(const std::string& owner = "") {
    grpc::ClientContext context;
    v1::SharedMemoryStatusRequest request;
    request.set_owner(owner);
    v1::SharedMemoryStatusResponse response;
    const grpc::Status status = stub_->SharedMemoryStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
  grpc::Status Unregister(const std::string& name, const std::string& owner = "") {
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name);
    request.set_owner(owner);
    v1::UnregisterSharedMemoryResponse response;
    return stub_->UnregisterSharedMemory(&context, request, &response);
  }
  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub_->Execute(&context, request, response);
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* SharedMemoryTest::server_ = nullptr;

// `request` with input `name` moved into region `region` (registered from `base` of `object`)
// at `offset`.
void MoveInput(v1::ExecuteRequest* request, const std::string& name, ShmObject& object,
               uint64_t base, const std::string& region, uint64_t offset) {
  v1::Tensor& tensor = (*request->mutable_inputs())[name];
  std::memcpy(object.data() + base + offset, tensor.data().data(), tensor.data().size());
  *tensor.mutable_ref() = RegionRef(region, offset, tensor.data().size());
  tensor.clear_data();
}

TEST_F(SharedMemoryTest, AttentionInAndOutOfARegionEqualsTheInlineCall) {
  AttentionInputsOptions options;
  options.B = 2;
  options.Sq = 21;
  options.Sk = 30;
  options.D = 40;
  options.dtype = DType::kF16;
  options.seed = 5;
  const TensorMap inputs = RandomAttentionInputs(options);
  v1::ExecuteRequest inline_request;
  inline_request.set_kernel("flash_attention");
  for (const auto& [name, tensor] : inputs)
    (*inline_request.mutable_inputs())[name] = ToWire(tensor);
  (*inline_request.mutable_parameters())["causal"].set_bool_value(true);
  (*inline_request.mutable_parameters())["return_lse"].set_bool_value(true);
  v1::ExecuteResponse want;
  ASSERT_TRUE(Execute(inline_request, &want).ok());

  ShmObject object(1 << 20);
  ASSERT_TRUE(Register("t", object, 4096, (1 << 20) - 4096).ok());
  v1::ExecuteRequest request = inline_request;
  MoveInput(&request, "q", object, 4096, "t", 0);
  MoveInput(&request, "k", object, 4096, "t", 64 * 1024);
  (*request.mutable_output_regions())["out"] = RegionRef("t", 256 * 1024, 128 * 1024);
  std::memset(object.data() + 4096 + 256 * 1024, 0x7f, 128 * 1024);  // poisoned
  v1::ExecuteResponse got;
  grpc::Status status = Execute(request, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string& out = want.outputs().at("out").data();
  EXPECT_TRUE(got.outputs().at("out").data().empty());
  EXPECT_EQ(got.outputs().at("out").dtype(), v1::DTYPE_F16);
  EXPECT_EQ(got.outputs().at("out").shape_size(), 4);
  EXPECT_TRUE(std::string(object.data() + 4096 + 256 * 1024, out.size()) == out);
  EXPECT_TRUE(got.outputs().at("lse").data() == want.outputs().at("lse").data());  // inline

  // The stream takes refs too.
  grpc::ClientContext context;
  auto stream = stub_->ExecuteStream(&context);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  v1::ExecuteResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  EXPECT_EQ(streamed.status().code(), 0) << streamed.status().message();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SharedMemoryTest, BadReferencesAndRegistrationsGetTheirCodes) {
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 3);
  ShmObject object(64 * 1024);
  ASSERT_TRUE(Register("r", object, 0, 64 * 1024).ok());
  EXPECT_EQ(Register("r", object, 0, 16).error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Register("big", object, 0, 128 * 1024).error_code(), StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext list_context;
  v1::SharedMemoryStatusResponse listed;
  ASSERT_TRUE(stub_->SharedMemoryStatus(&list_context, {}, &listed).ok());
  ASSERT_EQ(listed.regions_size(), 1);
  EXPECT_EQ(listed.regions(0).key(), object.key());
  EXPECT_EQ(listed.regions(0).kind(), "system");
  EXPECT_EQ(listed.regions(0).in_use(), 0);

  const v1::ExecuteRequest good = [&] {
    v1::ExecuteRequest request = MeanPoolingRequest(x);
    MoveInput(&request, "x", object, 0, "r", 1024);
    return request;
  }();
  v1::ExecuteResponse response;
  ASSERT_TRUE(Execute(good, &response).ok());
  struct Bad {
    const char* what;
    StatusCode code;
    std::function<void(v1::ExecuteRequest*)> spoil;
  };
  const std::vector<Bad> cases = {
      {"unknown region", StatusCode::NOT_FOUND,
       [](v1::ExecuteRequest* r) { (*r->mutable_inputs())["x"].mutable_ref()->set_region("z"); }},
      {"past the end", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) {
         (*r->mutable_inputs())["x"].mutable_ref()->set_offset(63 * 1024 + 4);
       }},
      {"not the tensor's size", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) {
         (*r->mutable_inputs())["x"].mutable_ref()->set_byte_size(100);
       }},
      {"data and ref", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_inputs())["x"].set_data("1234"); }},
      {"output too small", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_output_regions())["out"] = RegionRef("r", 0, 8); }},
      {"output not produced", StatusCode::INVALID_ARGUMENT,
       [](v1::ExecuteRequest* r) { (*r->mutable_output_regions())["lse"] = RegionRef("r", 0, 8); }},
  };
  for (const Bad& bad : cases) {
    v1::ExecuteRequest request = good;
    bad.spoil(&request);
    const grpc::Status status = Execute(request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << bad.what << ": " << status.error_message();
  }
  v1::ExecuteBatchRequest batch;
  batch.set_kernel("mean_pooling");
  *batch.add_items()->mutable_inputs() = good.inputs();
  grpc::ClientContext batch_context;
  v1::ExecuteBatchResponse batch_response;
  grpc::Status batched = stub_->ExecuteBatch(&batch_context, batch, &batch_response);
  EXPECT_TRUE(!batched.ok() || batch_response.items(0).status().code() != 0);

  grpc::ClientContext gone_context;
  v1::UnregisterSharedMemoryRequest gone;
  gone.set_name("r");
  v1::UnregisterSharedMemoryResponse unregistered;
  ASSERT_TRUE(stub_->UnregisterSharedMemory(&gone_context, gone, &unregistered).ok());
  EXPECT_EQ(Execute(good, &response).error_code(), StatusCode::NOT_FOUND);
}

// Registers a fresh 4 KiB object as region "r" with the server at `address`.
grpc::Status RegisterFreshObject(const std::string& address) {
  ShmObject object(4096);
  auto stub = MakeStub(address);
  grpc::ClientContext context;
  v1::RegisterSystemSharedMemoryRequest request;
  request.set_name("r");
  request.set_key(object.key());
  request.set_byte_size(4096);
  v1::RegisterSharedMemoryResponse response;
  return stub->RegisterSystemSharedMemory(&context, request, &response);
}

// The region kinds GetServerInfo lists (ServerInfo.shared_memory): what a client checks before
// it takes a region by itself (the CLI's --shared-memory=auto).
std::vector<std::string> ServedKinds(const std::string& address) {
  grpc::ClientContext context;
  v1::ServerInfo info;
  const grpc::Status status = MakeStub(address)->GetServerInfo(&context, {}, &info);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return {info.shared_memory().begin(), info.shared_memory().end()};
}

TEST_F(SharedMemoryTest, ServerInfoSaysSystemRegionsAreServed) {
  // A loopback listener: system regions (and CUDA ones where the server has a GPU).
  const std::vector<std::string> kinds = ServedKinds(server_->address());
  EXPECT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.front(), "system");
  for (const std::string& kind : kinds) EXPECT_TRUE(kind == "system" || kind == "cuda") << kind;
}

TEST(SharedMemoryOffTest, RegistrationIsUnimplementedAndTheStartupLineSaysSo) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--shared-memory=off"}).ok());
  EXPECT_NE(server.startup_line().find("; shared memory off"), std::string::npos)
      << server.startup_line();
  EXPECT_EQ(ServedKinds(server.address()), std::vector<std::string>{});
  const grpc::Status status = RegisterFreshObject(server.address());
  EXPECT_EQ(status.error_code(), StatusCode::UNIMPLEMENTED);
  EXPECT_NE(status.error_message().find("--shared-memory=off"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(server.Stop().ok());
}

// True when `text` is printable ASCII only.
bool Printable(const std::string& text) {
  for (char c : text) {
    if (c < ' ' || c > '~') return false;
  }
  return true;
}

TEST_F(SharedMemoryTest, StatusShowsTheOwnerAndUnregisterKeepsToTheCallersRegions) {
  ShmObject object(8192);
  ASSERT_TRUE(Register("r", object, 0, 8192).ok());
  v1::SharedMemoryStatusResponse own = Status();
  ASSERT_EQ(own.regions_size(), 1);
  EXPECT_EQ(own.regions(0).owner(), "anonymous");  // a server without authentication
  EXPECT_FALSE(own.regions(0).pinned());           // no GPUs here
  EXPECT_EQ(Status("*").regions_size(), 1);        // the anonymous caller is an admin
  EXPECT_EQ(Status("anonymous").regions_size(), 1);
  EXPECT_EQ(Status("someone-else").regions_size(), 0);
  // Another owner's regions (there are none) are all an owner field reaches.
  EXPECT_TRUE(Unregister("", "someone-else").ok());
  EXPECT_EQ(Unregister("r", "someone-else").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Status().regions_size(), 1);
  EXPECT_TRUE(Unregister("").ok());
  EXPECT_EQ(Status().regions_size(), 0);
}

TEST_F(SharedMemoryTest, NamesAndKeysBreakingTheRulesAreInvalidArgumentAndNeverEchoed) {
  ShmObject object(4096);
  const std::vector<std::string> names = {std::string("a\0b", 3), "line\nbreak",
                                          "\xE2\x80\x8Fright-to-left", "two words",
                                          std::string(1 << 20, 'x')};
  for (const std::string& name : names) {
    const grpc::Status status = Register(name, object, 0, 16);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_TRUE(Printable(status.error_message())) << status.error_message();
    EXPECT_LT(status.error_message().size(), 512u);
  }
  // A key with a NUL was cut there and opened the object before it.
  const grpc::Status nul = RegisterKey("r", object.key() + std::string(1, '\0') + "x", 0, 16);
  EXPECT_EQ(nul.error_code(), StatusCode::INVALID_ARGUMENT) << nul.error_message();
  EXPECT_NE(nul.error_message().find("expected a POSIX shared-memory name"), std::string::npos)
      << nul.error_message();
  EXPECT_TRUE(Printable(nul.error_message())) << nul.error_message();
  for (const std::string& key : {std::string("relative"), std::string("/a/b"),
                                 "/" + std::string(300, 'k'), std::string("/..")}) {
    EXPECT_EQ(RegisterKey("r", key, 0, 16).error_code(), StatusCode::INVALID_ARGUMENT) << key;
  }
  EXPECT_EQ(Status().regions_size(), 0);
  EXPECT_TRUE(Register(std::string(128, 'n'), object, 0, 16).ok());
}

TEST_F(SharedMemoryTest, ACallIntoAShrunkObjectIsInvalidArgumentAndTheServerLives) {
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 3);
  ShmObject object(64 * 1024);
  ASSERT_TRUE(Register("r", object, 0, 64 * 1024).ok());
  v1::ExecuteRequest kept = MeanPoolingRequest(x);
  MoveInput(&kept, "x", object, 0, "r", 1024);
  v1::ExecuteRequest lost = MeanPoolingRequest(x);
  MoveInput(&lost, "x", object, 0, "r", 40 * 1024);
  v1::ExecuteRequest lost_output = kept;
  (*lost_output.mutable_output_regions())["out"] = RegionRef("r", 48 * 1024, 4096);
  object.Resize(16 * 1024);  // the client cuts its object

  v1::ExecuteResponse response;
  grpc::Status status = Execute(lost, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
  const std::string want = "input 'x': the object of region 'r' (key '" + object.key() +
                           "') is 16384 bytes now, and the call needs its bytes [40960, " +
                           std::to_string(40 * 1024 + x.nbytes()) + ")";
  EXPECT_NE(status.error_message().find(want), std::string::npos) << status.error_message();
  status = Execute(lost_output, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("output 'out'"), std::string::npos)
      << status.error_message();
  // The stream answers in-band.
  grpc::ClientContext context;
  auto stream = stub_->ExecuteStream(&context);
  ASSERT_TRUE(stream->Write(lost));
  stream->WritesDone();
  v1::ExecuteResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  EXPECT_EQ(streamed.status().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_TRUE(stream->Finish().ok());
  // The server lives on, and the part still there serves.
  status = Execute(kept, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.outputs().at("out").shape_size(), 2);
}

TEST_F(SharedMemoryTest, InUseCountsTheCallsHoldingARegionNotTheirTensors) {
  // Calls queued behind a slow one on the CPU worker hold their regions while they wait.
  AttentionInputsOptions slow_options;  // about a second on one core
  slow_options.B = 2;
  slow_options.Sq = 1024;
  slow_options.Sk = 1024;
  slow_options.Hq = 8;
  slow_options.Hkv = 8;
  slow_options.D = 64;
  const TensorMap slow_inputs = RandomAttentionInputs(slow_options);
  v1::ExecuteRequest slow;
  slow.set_kernel("flash_attention");
  slow.set_platform("cpu");
  for (const auto& [name, tensor] : slow_inputs) (*slow.mutable_inputs())[name] = ToWire(tensor);

  AttentionInputsOptions small_options;  // q, k, v and out: 4 tensors in one region
  const TensorMap small_inputs = RandomAttentionInputs(small_options);
  ShmObject object(1 << 20);
  ASSERT_TRUE(Register("t", object, 0, 1 << 20).ok());
  v1::ExecuteRequest small;
  small.set_kernel("flash_attention");
  small.set_platform("cpu");
  uint64_t offset = 0;
  for (const auto& [name, tensor] : small_inputs) {
    (*small.mutable_inputs())[name] = ToWire(tensor);
    MoveInput(&small, name, object, 0, "t", offset);
    offset += 64 * 1024;
  }
  (*small.mutable_output_regions())["out"] = RegionRef("t", offset, 64 * 1024);

  int most = 0;
  for (int attempt = 0; attempt < 3 && most == 0; ++attempt) {
    std::thread slow_call([&] {
      v1::ExecuteResponse response;
      EXPECT_TRUE(Execute(slow, &response).ok());
    });
    // Received (the in-flight gauge counts it from then on), then parsed and queued at once.
    for (int poll = 0; poll < 1000; ++poll) {
      absl::StatusOr<std::string> metrics = HttpGet(server_->metrics_port(), "/metrics");
      if (metrics.ok() && MetricSum(*metrics, "kernelserve_inflight_requests") >= 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::atomic<int> running{2};
    std::vector<std::thread> small_calls;
    for (int i = 0; i < 2; ++i) {
      small_calls.emplace_back([&] {
        v1::ExecuteResponse response;
        const grpc::Status status = Execute(small, &response);
        EXPECT_TRUE(status.ok()) << status.error_message();
        --running;
      });
    }
    for (int poll = 0; poll < 2000 && running.load() > 0; ++poll) {
      const v1::SharedMemoryStatusResponse listed = Status();
      if (listed.regions_size() == 1) most = std::max(most, listed.regions(0).in_use());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (std::thread& call : small_calls) call.join();
    slow_call.join();
  }
  EXPECT_GE(most, 1) << "no poll saw a call waiting";
  EXPECT_LE(most, 2) << "two calls, whatever their tensors";
  EXPECT_EQ(Status().regions(0).in_use(), 0);
}

TEST(SharedMemoryCapsTest, RegionCountsAndBytesAreCappedNamingTheFlags) {
  ShmObject object(16384);
  auto registered = [&](v1::KernelService::Stub& stub, const std::string& name, uint64_t bytes) {
    grpc::ClientContext context;
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(object.key());
    request.set_byte_size(bytes);
    v1::RegisterSharedMemoryResponse response;
    return stub.RegisterSystemSharedMemory(&context, request, &response);
  };
  auto expect_full = [](const grpc::Status& status, const std::string& words) {
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_NE(status.error_message().find(words), std::string::npos) << status.error_message();
  };
  {
    ServerProcess server;
    ASSERT_TRUE(server
                    .Start({"--cache=memory", "--max-shared-memory-regions=3",
                            "--quota-shared-memory-regions=8"})
                    .ok());
    auto stub = MakeStub(server.address());
    for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(registered(*stub, name, 16).ok());
    expect_full(registered(*stub, "d", 16), "--max-shared-memory-regions=3");
    EXPECT_TRUE(server.Stop().ok());
  }
  {
    ServerProcess server;
    ASSERT_TRUE(server
                    .Start({"--cache=memory", "--quota-shared-memory-regions=2",
                            "--quota-shared-memory-bytes=8192"})
                    .ok());
    auto stub = MakeStub(server.address());
    ASSERT_TRUE(registered(*stub, "a", 4096).ok());
    expect_full(registered(*stub, "b", 8192), "--quota-shared-memory-bytes=8192");
    ASSERT_TRUE(registered(*stub, "b", 4096).ok());
    expect_full(registered(*stub, "c", 16), "holds 2 regions, --quota-shared-memory-regions=2");
    EXPECT_TRUE(server.Stop().ok());
  }
  for (const char* flag : {"--max-shared-memory-regions=0", "--max-shared-memory-regions=8193",
                           "--quota-shared-memory-regions=0", "--quota-pinned-bytes=-1"}) {
    ServerProcess server;
    const absl::Status started = server.Start({"--cache=memory", flag});
    EXPECT_FALSE(started.ok()) << flag;
  }
}

// alice and bob are callers, ops an admin.
class SharedMemoryTenancyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string tokens = MakeTempDir("shm-tenancy") + "/tokens";
    std::ofstream(tokens) << "alice caller tok-alice\nbob caller tok-bob\nops admin tok-ops\n";
    server_ = new ServerProcess();
    absl::Status started = server_->Start({"--cache=memory", "--auth-token-file=" + tokens});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override {
    stub_ = MakeStub(server_->address());
    v2_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { EXPECT_TRUE(Unregister("tok-ops", "", "*").ok()); }

  static std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("authorization", "Bearer " + token);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return context;
  }
  grpc::Status Register(const std::string& token, const std::string& name,
                        const ShmObject& object) {
    v1::RegisterSystemSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(object.key());
    request.set_byte_size(object.size());
    v1::RegisterSharedMemoryResponse response;
    return stub_->RegisterSystemSharedMemory(As(token).get(), request, &response);
  }
  grpc::Status Unregister(const std::string& token, const std::string& name,
                          const std::string& owner = "") {
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name);
    request.set_owner(owner);
    v1::UnregisterSharedMemoryResponse response;
    return stub_->UnregisterSharedMemory(As(token).get(), request, &response);
  }
  // "owner/name" of each region `token`'s identity sees, or the call's error.
  absl::StatusOr<std::vector<std::string>> Listed(const std::string& token,
                                                  const std::string& owner = "") {
    v1::SharedMemoryStatusRequest request;
    request.set_owner(owner);
    v1::SharedMemoryStatusResponse response;
    const grpc::Status status = stub_->SharedMemoryStatus(As(token).get(), request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    std::vector<std::string> regions;
    for (const v1::SharedMemoryRegion& region : response.regions()) {
      regions.push_back(region.owner() + "/" + region.name());
    }
    return regions;
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> v2_;
};
ServerProcess* SharedMemoryTenancyTest::server_ = nullptr;

using Names = std::vector<std::string>;

TEST_F(SharedMemoryTenancyTest, IdentitiesNeitherSeeUseRemoveNorShadowEachOthersRegions) {
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 3);
  const Tensor y = RandomTensor(DType::kF32, {2, 8, 16}, 4);
  ShmObject alices(64 * 1024);
  ShmObject bobs(64 * 1024);
  v1::ExecuteRequest call = MeanPoolingRequest(x);
  MoveInput(&call, "x", alices, 0, "r", 0);
  std::memcpy(bobs.data(), y.data(), y.nbytes());
  v1::ExecuteResponse want_x;
  v1::ExecuteResponse want_y;
  ASSERT_TRUE(stub_->Execute(As("tok-alice").get(), MeanPoolingRequest(x), &want_x).ok());
  ASSERT_TRUE(stub_->Execute(As("tok-alice").get(), MeanPoolingRequest(y), &want_y).ok());

  ASSERT_TRUE(Register("tok-alice", "r", alices).ok());
  EXPECT_EQ(*Listed("tok-alice"), Names{"alice/r"});
  EXPECT_EQ(*Listed("tok-bob"), Names{});
  v1::ExecuteResponse got;
  EXPECT_EQ(stub_->Execute(As("tok-bob").get(), call, &got).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Unregister("tok-bob", "r").error_code(), StatusCode::NOT_FOUND);
  EXPECT_TRUE(Unregister("tok-bob", "").ok());
  EXPECT_EQ(Listed("tok-bob", "alice").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Listed("tok-bob", "*").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Unregister("tok-bob", "", "alice").error_code(), StatusCode::PERMISSION_DENIED);

  // Bob's "r" is his own: Alice's calls still read her object, his read his.
  ASSERT_TRUE(Register("tok-bob", "r", bobs).ok());
  ASSERT_TRUE(stub_->Execute(As("tok-alice").get(), call, &got).ok());
  EXPECT_TRUE(got.outputs().at("out").data() == want_x.outputs().at("out").data());
  ASSERT_TRUE(stub_->Execute(As("tok-bob").get(), call, &got).ok());
  EXPECT_TRUE(got.outputs().at("out").data() == want_y.outputs().at("out").data());

  // The admin sees and removes everyone's, and names only its own in calls.
  EXPECT_EQ(*Listed("tok-ops"), Names{});
  EXPECT_EQ(*Listed("tok-ops", "*"), (Names{"alice/r", "bob/r"}));
  EXPECT_EQ(*Listed("tok-ops", "bob"), Names{"bob/r"});
  EXPECT_EQ(stub_->Execute(As("tok-ops").get(), call, &got).error_code(), StatusCode::NOT_FOUND);
  ASSERT_TRUE(Unregister("tok-ops", "", "bob").ok());
  EXPECT_EQ(*Listed("tok-ops", "*"), Names{"alice/r"});
}

TEST_F(SharedMemoryTenancyTest, TheV2MethodsActOnTheCallersOwnRegionsAdminsIncluded) {
  ShmObject object(4096);
  ASSERT_TRUE(Register("tok-alice", "r", object).ok());
  ASSERT_TRUE(Register("tok-ops", "mine", object).ok());
  inference::SystemSharedMemoryStatusResponse listed;
  ASSERT_TRUE(v2_->SystemSharedMemoryStatus(As("tok-bob").get(), {}, &listed).ok());
  EXPECT_TRUE(listed.regions().empty());
  ASSERT_TRUE(v2_->SystemSharedMemoryStatus(As("tok-ops").get(), {}, &listed).ok());
  EXPECT_EQ(listed.regions().size(), 1u);
  EXPECT_TRUE(listed.regions().contains("mine"));
  // Triton's tools send Unregister("") before and after a run.
  inference::SystemSharedMemoryUnregisterResponse gone;
  ASSERT_TRUE(v2_->SystemSharedMemoryUnregister(As("tok-ops").get(), {}, &gone).ok());
  ASSERT_TRUE(v2_->SystemSharedMemoryUnregister(As("tok-bob").get(), {}, &gone).ok());
  EXPECT_EQ(*Listed("tok-ops", "*"), Names{"alice/r"});
}

// A shm object owned by `uid`, with `mode`, created (and removed) by this root process.
class OwnedObject {
 public:
  OwnedObject(uid_t uid, mode_t mode, size_t bytes)
      : key_("/kernelserve-test-owned-" + std::to_string(getpid()) + "-" +
             std::to_string(counter_++)) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    EXPECT_EQ(fchown(fd, uid, uid), 0);
    EXPECT_EQ(fchmod(fd, mode), 0);
    close(fd);
  }
  ~OwnedObject() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }

 private:
  static inline int counter_ = 0;
  std::string key_;
};

// Item 10 of the robustness round: a root server mapped any user's object for any caller. Now
// a caller registers only what it could open itself, whether it calls over a Unix socket (its
// uid from SO_PEERCRED) or loopback TCP (the uid owning its socket).
TEST(SharedMemoryAccessTest, AnotherUsersPrivateObjectIsPermissionDenied) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to call as another user";
  constexpr uid_t kNobody = 65534;
  const std::string register_binary = PublicCopy(KERNELSERVE_REGISTER_BINARY);
  const std::string dir = MakeTempDir("shm-access");
  chmod(dir.c_str(), 0755);
  for (const std::string& listen : {"unix:" + dir + "/ks.sock", std::string("127.0.0.1:0")}) {
    ServerProcess server;
    ASSERT_TRUE(server.Start({"--cache=memory", "--listen=" + listen}).ok()) << listen;
    if (listen.rfind("unix:", 0) == 0) chmod((dir + "/ks.sock").c_str(), 0777);
    OwnedObject roots(0, 0600, 4096), public_one(0, 0666, 4096), nobodys(kNobody, 0600, 4096);
    auto register_as = [&](uid_t uid, const std::string& name, const std::string& key) {
      std::string output;
      absl::StatusOr<int> code =
          RunAs(uid, uid, {register_binary, server.address(), name, key, "4096"}, &output);
      EXPECT_TRUE(code.ok()) << code.status();
      return std::make_pair(code.value_or(-1), output);
    };
    auto [denied, why] = register_as(kNobody, "theirs", roots.key());
    EXPECT_EQ(denied, 7) << listen << ": " << why;  // PERMISSION_DENIED
    EXPECT_NE(why.find("is not readable and writable by the caller (uid 65534"), std::string::npos)
        << why;
    EXPECT_EQ(register_as(kNobody, "own", nobodys.key()).first, 0) << listen;
    EXPECT_EQ(register_as(kNobody, "public", public_one.key()).first, 0) << listen;
    EXPECT_EQ(register_as(0, "roots", roots.key()).first, 0) << listen;
    EXPECT_EQ(*server.Stop(), 0);
  }
}

TEST(SharedMemoryAccessTest, ARootServerServesNoSystemRegionsUnlessAsked) {
  if (geteuid() != 0) GTEST_SKIP() << "a server not running as root serves them";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--shared-memory-as-root=false"}).ok());
  EXPECT_NE(server.startup_line().find("(system off as root: --shared-memory-as-root)"),
            std::string::npos)
      << server.startup_line();
  const grpc::Status status = RegisterFreshObject(server.address());
  EXPECT_EQ(status.error_code(), StatusCode::UNIMPLEMENTED);
  EXPECT_NE(status.error_message().find("the server runs as root; --shared-memory-as-root"),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
