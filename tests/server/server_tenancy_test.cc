// Callers kept apart, over the kernelserve-server binary: identities and roles from the token
// file (config writes for admins only), per-identity quotas (request rate, in-flight bytes),
// per-identity metrics, /metrics behind its own token, and reflection under the token rule.
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "core/utils/random_tensor.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

// alice and bob are callers, ops an admin whose file holds only the token's SHA-256.
constexpr char kTokens[] =
    "# identity role token\n"
    "alice caller tok-alice\n"
    "bob   caller tok-bob\n"
    "ops   admin  sha256:041086374f20673b2d3681b40573ae817db655c399362cd08205cf77c8217ed0\n";

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = MakeTempDir(dir) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The token whose SHA-256 kTokens holds for ops.
std::string OpsToken() { return "tok-ops"; }

class TenancyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    const std::string tokens = WriteFile("tenancy", "tokens", kTokens);
    const std::string metrics = WriteFile("tenancy-metrics", "token", "m-tok\n");
    absl::Status started = server_->Start({"--cache=memory", "--auth-token-file=" + tokens,
                                           "--metrics-auth-token-file=" + metrics, "--reflection"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }

  static std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("authorization", "Bearer " + token);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return context;
  }

  static v1::PutConfigRequest PinRequest() {
    v1::PutConfigRequest put;
    put.set_kernel("mean_pooling");
    v1::Tensor& spec = (*put.mutable_inputs())["x"];
    spec.set_dtype(v1::DTYPE_F32);
    for (int64_t d : {2, 8, 16}) spec.add_shape(d);
    put.mutable_config()->set_block_size(64);
    (*put.mutable_config()->mutable_fields())["threads"] = 1;
    put.mutable_config()->set_platform("cpu");
    return put;
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* TenancyTest::server_ = nullptr;

TEST_F(TenancyTest, StartupLineNamesTheIdentities) {
  EXPECT_NE(server_->startup_line().find("auth bearer tokens (3 identities)"), std::string::npos)
      << server_->startup_line();
}

TEST_F(TenancyTest, ConfigWritesNeedTheAdminRoleTuningDoesNot) {
  v1::PutConfigResponse pinned;
  grpc::Status refused = stub_->PutConfig(As("tok-alice").get(), PinRequest(), &pinned);
  EXPECT_EQ(refused.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(refused.error_message().find("PutConfig needs the admin role; identity 'alice'"),
            std::string::npos)
      << refused.error_message();

  grpc::Status put = stub_->PutConfig(As(OpsToken()).get(), PinRequest(), &pinned);
  ASSERT_TRUE(put.ok()) << put.error_message();

  v1::DeleteConfigRequest del;
  del.set_cache_key(pinned.cache_key());
  del.set_device_fingerprint(pinned.device_fingerprint());
  v1::DeleteConfigResponse deleted;
  EXPECT_EQ(stub_->DeleteConfig(As("tok-bob").get(), del, &deleted).error_code(),
            StatusCode::PERMISSION_DENIED);
  // Still there for everyone: bob's call is served with the pinned config.
  const Tensor x = RandomTensor(DType::kF32, {2, 8, 16}, 7);
  v1::ExecuteResponse run;
  ASSERT_TRUE(stub_->Execute(As("tok-bob").get(), MeanPoolingRequest(x), &run).ok());
  EXPECT_EQ(run.config().block_size(), 64);
  EXPECT_EQ(run.cache_key(), pinned.cache_key());
  grpc::Status removed = stub_->DeleteConfig(As(OpsToken()).get(), del, &deleted);
  EXPECT_TRUE(removed.ok()) << removed.error_message();

  // A caller's own tuning is allowed (the lease keeps results honest).
  v1::AutotuneRequest tune;
  tune.set_kernel("mean_pooling");
  (*tune.mutable_inputs())["x"] = ToWire(RandomTensor(DType::kF32, {1, 4, 8}, 8));
  v1::AutotuneResponse tuned;
  grpc::Status autotune = stub_->Autotune(As("tok-alice").get(), tune, &tuned);
  EXPECT_TRUE(autotune.ok()) << autotune.error_message();
}

TEST_F(TenancyTest, MetricsNeedTheirTokenAndCountEachIdentity) {
  const Tensor x = RandomTensor(DType::kF32, {1, 4, 8}, 9);
  v1::ExecuteResponse run;
  ASSERT_TRUE(stub_->Execute(As("tok-alice").get(), MeanPoolingRequest(x), &run).ok());

  absl::StatusOr<HttpResponse> open = HttpRequest(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->status, 401);
  EXPECT_EQ(open->body.find("kernelserve_requests_total"), std::string::npos);
  absl::StatusOr<HttpResponse> wrong =
      HttpRequest(server_->metrics_port(), "/metrics", {"Authorization: Bearer tok-alice"});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 401);

  absl::StatusOr<HttpResponse> scrape =
      HttpRequest(server_->metrics_port(), "/metrics", {"Authorization: Bearer m-tok"});
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  ASSERT_EQ(scrape->status, 200) << scrape->body;
  EXPECT_GE(MetricSum(scrape->body, "kernelserve_identity_requests_total",
                      {"identity=\"alice\"", "code=\"OK\""}),
            1);
  // Every identity of the token file is exported from the start, nobody else.
  for (const char* identity : {"alice", "bob", "ops"}) {
    EXPECT_NE(
        scrape->body.find(std::string("kernelserve_quota_refusals_total{identity=\"") + identity),
        std::string::npos)
        << identity;
  }
  EXPECT_EQ(scrape->body.find("identity=\"anonymous\""), std::string::npos);
  std::string output;
  EXPECT_EQ(PromtoolCheck(scrape->body, &output), 0) << output;
}

// One ServerReflectionInfo exchange asking for the service list, over the generic stub; the
// call's status (and the answer's bytes in *answer when it came).
grpc::Status ListServices(const std::string& address, const std::string& token,
                          std::string* answer) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue queue;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  auto step = [&queue](int tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&got, &ok));
    EXPECT_EQ(got, reinterpret_cast<void*>(tag));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  const char request[] = {0x3a, 0x00};
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  step(2);
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  if (step(4)) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    for (const grpc::Slice& s : slices)
      answer->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

TEST_F(TenancyTest, ReflectionFollowsTheTokenRule) {
  std::string answer;
  grpc::Status refused = ListServices(server_->address(), "", &answer);
  EXPECT_EQ(refused.error_code(), StatusCode::CANCELLED) << refused.error_message();
  EXPECT_EQ(answer.find("kernelserve.v1.KernelService"), std::string::npos);
  answer.clear();
  EXPECT_EQ(ListServices(server_->address(), "not-a-token", &answer).error_code(),
            StatusCode::CANCELLED);
  answer.clear();
  grpc::Status listed = ListServices(server_->address(), "tok-bob", &answer);
  EXPECT_TRUE(listed.ok()) << listed.error_message();
  EXPECT_NE(answer.find("kernelserve.v1.KernelService"), std::string::npos);
}

TEST(TenancyQuotaTest, EachIdentityHasItsOwnRateAndInflightQuota) {
  const std::string tokens = WriteFile("quota", "tokens", kTokens);
  ServerProcess server;
  ASSERT_TRUE(server
                  .Start({"--cache=memory", "--auth-token-file=" + tokens,
                          "--quota-requests-per-second=0.01", "--quota-request-burst=3",
                          "--quota-inflight-bytes=1048576"})
                  .ok());
  auto stub = MakeStub(server.address());
  auto as = [](const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("authorization", "Bearer " + token);
    return context;
  };
  const Tensor small = RandomTensor(DType::kF32, {1, 4, 8}, 10);
  v1::ExecuteResponse run;
  for (int i = 0; i < 3; ++i) {
    grpc::Status status = stub->Execute(as("tok-alice").get(), MeanPoolingRequest(small), &run);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
  }
  grpc::Status limited = stub->Execute(as("tok-alice").get(), MeanPoolingRequest(small), &run);
  EXPECT_EQ(limited.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(limited.error_message().find("identity 'alice' is over its request rate"),
            std::string::npos)
      << limited.error_message();
  // bob's bucket is his own. 2 MiB of input passes his in-flight quota of 1 MiB (the server's
  // budget of 4 GiB would take it), 512 KiB does not.
  const Tensor large = RandomTensor(DType::kF32, {1, 512, 1024}, 11);
  grpc::Status over = stub->Execute(as("tok-bob").get(), MeanPoolingRequest(large), &run);
  EXPECT_EQ(over.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("in-flight bytes of identity 'bob'"), std::string::npos)
      << over.error_message();
  EXPECT_NE(over.error_message().find("--quota-inflight-bytes=1048576"), std::string::npos);
  const Tensor half = RandomTensor(DType::kF32, {1, 128, 1024}, 12);
  grpc::Status fits = stub->Execute(as("tok-bob").get(), MeanPoolingRequest(half), &run);
  EXPECT_TRUE(fits.ok()) << fits.error_message();

  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_quota_refusals_total",
                      {"identity=\"alice\"", "quota=\"rate\""}),
            1);
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_quota_refusals_total",
                      {"identity=\"bob\"", "quota=\"inflight_bytes\""}),
            1);
  EXPECT_EQ(*server.Stop(), 0);
}

TEST(TenancyRoleTest, AnonymousCallersMayBeMadeCallers) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--anonymous-role=caller"}).ok());
  auto stub = MakeStub(server.address());
  grpc::ClientContext context;
  v1::PutConfigRequest put;
  put.set_kernel("mean_pooling");
  v1::PutConfigResponse pinned;
  grpc::Status refused = stub->PutConfig(&context, put, &pinned);
  EXPECT_EQ(refused.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(refused.error_message().find("identity 'anonymous' has the caller role"),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(server.startup_line().find("auth none: callers are anonymous (caller)"),
            std::string::npos)
      << server.startup_line();
  EXPECT_EQ(*server.Stop(), 0);
}

// On a Unix socket without tokens each local user is an identity of its own: uid:<n>, an admin
// when it is the server's own user (or root), a caller otherwise.
TEST(TenancyUnixTest, EachLocalUserIsAnIdentityOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to call as another user";
  const std::string dir = MakeTempDir("unix-identity");
  chmod(dir.c_str(), 0755);
  const std::string socket = dir + "/ks.sock";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--listen=unix:" + socket}).ok());
  chmod(socket.c_str(), 0777);  // any local user may connect
  const std::string cli = PublicCopy(KERNELSERVE_CLI_BINARY);
  const std::vector<std::string> pin = {
      cli,       "--target",    "unix:" + socket, "cache", "put",      "mean_pooling",
      "--shape", "x=f32:1,4,8", "--platform",     "cpu",   "--config", "block_size=64,threads=1"};
  std::string output;
  absl::StatusOr<int> nobody = RunAs(65534, 65534, pin, &output);
  ASSERT_TRUE(nobody.ok()) << nobody.status();
  EXPECT_EQ(*nobody, 7) << output;  // PERMISSION_DENIED
  EXPECT_NE(output.find("identity 'uid:65534' has the caller role"), std::string::npos) << output;
  absl::StatusOr<int> runs =
      RunAs(65534, 65534,
            {cli, "--target", "unix:" + socket, "run", "mean_pooling", "--shape", "x=f32:1,4,8"},
            &output);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(*runs, 0) << output;
  absl::StatusOr<int> root = RunAs(0, 0, pin, &output);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(*root, 0) << output;
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
