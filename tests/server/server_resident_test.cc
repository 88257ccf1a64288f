// Resident tensors over the kernelserve-server binary (CPU platform): created from data or
// zeros, read by calls in place of inputs and written by them as outputs, equal to inline calls
// bit for bit; written and read by rows and bytes; idempotent creates; each bad reference with
// its code; tensors kept apart between the identities of a token file; the caps; idle expiry;
// a tensor in use neither deleted nor torn by a write; the server healthy after all of it.
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/utils/random_tensor.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

constexpr char kTokens[] =
    "alice caller tok-alice\n"
    "bob   caller tok-bob\n"
    "ops   admin  tok-ops\n";

std::unique_ptr<grpc::ClientContext> As(const std::string& token, int seconds = 30) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

v1::TensorRef ResidentRef(const std::string& name) {
  v1::TensorRef ref;
  ref.set_tensor(name);
  return ref;
}

// A create of `name` holding `tensor`'s bytes (its contents left out when `zeros`).
v1::CreateTensorRequest CreateOf(const std::string& name, const Tensor& tensor,
                                 bool zeros = false) {
  v1::CreateTensorRequest create;
  create.set_name(name);
  create.set_dtype(ToProto(tensor.dtype()));
  for (int64_t d : tensor.shape()) create.add_shape(d);
  if (!zeros) create.mutable_contents()->set_data(std::string(tensor.bytes()));
  return create;
}

v1::ExecuteRequest AttentionRequest(const TensorMap& inputs) {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  request.set_platform("cpu");
  for (const auto& [name, tensor] : inputs) (*request.mutable_inputs())[name] = ToWire(tensor);
  (*request.mutable_parameters())["causal"].set_bool_value(true);
  return request;
}

TensorMap Attention(int64_t sq, int64_t sk, int64_t d, uint64_t seed) {
  AttentionInputsOptions options;
  options.B = 2;
  options.Sq = sq;
  options.Sk = sk;
  options.D = d;
  options.dtype = DType::kF32;
  options.seed = seed;
  return RandomAttentionInputs(options);
}

class ResidentTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    const std::string tokens = MakeTempDir("resident") + "/tokens";
    std::ofstream(tokens) << kTokens;
    absl::Status started =
        server_->Start({"--cache=memory", "--auth-token-file=" + tokens,
                        "--max-resident-bytes=67108864", "--quota-resident-bytes=33554432"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }
  void TearDown() override {
    v1::DeleteTensorRequest all;
    all.set_owner("*");
    v1::DeleteTensorResponse deleted;
    grpc::Status status = stub_->DeleteTensor(As("tok-ops").get(), all, &deleted);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  grpc::Status Create(const v1::CreateTensorRequest& create, const std::string& token = "tok-alice",
                      v1::CreateTensorResponse* out = nullptr) {
    v1::CreateTensorResponse response;
    return stub_->CreateTensor(As(token).get(), create, out != nullptr ? out : &response);
  }
  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response,
                       const std::string& token = "tok-alice") {
    return stub_->Execute(As(token).get(), request, response);
  }
  v1::ReadTensorResponse Read(const std::string& name, int64_t first = 0, int64_t rows = -1) {
    v1::ReadTensorRequest read;
    read.set_name(name);
    read.set_row_offset(first);
    if (rows >= 0) read.set_rows(rows);
    v1::ReadTensorResponse response;
    grpc::Status status = stub_->ReadTensor(As("tok-alice").get(), read, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
  v1::ListTensorsResponse List(const std::string& token, const std::string& owner = "") {
    v1::ListTensorsRequest list;
    list.set_owner(owner);
    v1::ListTensorsResponse response;
    grpc::Status status = stub_->ListTensors(As(token).get(), list, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* ResidentTest::server_ = nullptr;

TEST_F(ResidentTest, KAndVResidentEqualTheInlineCallAndOutGoesIntoATensor) {
  const TensorMap inputs = Attention(19, 37, 24, 11);
  v1::ExecuteResponse want;
  ASSERT_TRUE(Execute(AttentionRequest(inputs), &want).ok());

  v1::CreateTensorResponse created;
  ASSERT_TRUE(Create(CreateOf("k", inputs.at("k")), "tok-alice", &created).ok());
  EXPECT_TRUE(created.created());
  EXPECT_EQ(created.tensor().device(), -1);
  EXPECT_EQ(created.tensor().byte_size(), inputs.at("k").nbytes());
  ASSERT_TRUE(Create(CreateOf("v", inputs.at("v"))).ok());
  // The output's tensor starts as zeros; poisoned it would read as NaN.
  ASSERT_TRUE(Create(CreateOf("out", inputs.at("q"), /*zeros=*/true)).ok());
  EXPECT_EQ(Read("out").tensor().data(), std::string(inputs.at("q").nbytes(), '\0'));

  v1::ExecuteRequest request = AttentionRequest(inputs);
  for (const char* name : {"k", "v"}) {
    v1::Tensor& tensor = (*request.mutable_inputs())[name];
    tensor.Clear();  // dtype and shape are the tensor's
    *tensor.mutable_ref() = ResidentRef(name);
  }
  v1::ExecuteResponse got;
  grpc::Status status = Execute(request, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.outputs().at("out").data(), want.outputs().at("out").data());

  (*request.mutable_output_regions())["out"] = ResidentRef("out");
  v1::ExecuteResponse into;
  status = Execute(request, &into);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(into.outputs().at("out").data().empty());
  EXPECT_EQ(into.outputs().at("out").shape_size(), 4);
  const v1::ReadTensorResponse read = Read("out");
  EXPECT_EQ(read.tensor().data(), want.outputs().at("out").data());
  EXPECT_EQ(read.tensor().dtype(), v1::DTYPE_F32);

  const v1::ListTensorsResponse listed = List("tok-alice");
  ASSERT_EQ(listed.tensors_size(), 3);
  for (const v1::ResidentTensorInfo& info : listed.tensors()) {
    EXPECT_EQ(info.owner(), "alice");
    EXPECT_EQ(info.calls(), 0);
    EXPECT_GE(info.last_used_unix_ms(), info.created_unix_ms());
    EXPECT_EQ(info.ttl_seconds(), 3600u);
  }
  EXPECT_GT(listed.server_started_unix_ms(), 0);
  EXPECT_EQ(listed.owner_bytes(),
            inputs.at("q").nbytes() + inputs.at("k").nbytes() + inputs.at("v").nbytes());
}

TEST_F(ResidentTest, OutWrittenInPlaceOverQIsTheInlineAnswer) {
  const TensorMap inputs = Attention(23, 23, 16, 12);
  v1::ExecuteResponse want;
  ASSERT_TRUE(Execute(AttentionRequest(inputs), &want).ok());
  ASSERT_TRUE(Create(CreateOf("q", inputs.at("q"))).ok());
  v1::ExecuteRequest request = AttentionRequest(inputs);
  *(*request.mutable_inputs())["q"].mutable_ref() = ResidentRef("q");
  (*request.mutable_inputs())["q"].clear_data();
  (*request.mutable_output_regions())["out"] = ResidentRef("q");
  v1::ExecuteResponse got;
  grpc::Status status = Execute(request, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Read("q").tensor().data(), want.outputs().at("out").data());
  // Answered, the call holds q no more: a delete right away is OK.
  v1::DeleteTensorRequest del;
  del.set_name("q");
  v1::DeleteTensorResponse deleted;
  ASSERT_TRUE(Execute(request, &got).ok());
  grpc::Status gone = stub_->DeleteTensor(As("tok-alice").get(), del, &deleted);
  EXPECT_TRUE(gone.ok()) << gone.error_message();

  // Over k the schema does not allow it.
  ASSERT_TRUE(Create(CreateOf("k2", inputs.at("k"))).ok());
  v1::ExecuteRequest over_k = AttentionRequest(inputs);
  (*over_k.mutable_inputs())["k"].clear_data();
  *(*over_k.mutable_inputs())["k"].mutable_ref() = ResidentRef("k2");
  (*over_k.mutable_output_regions())["out"] = ResidentRef("k2");
  status = Execute(over_k, &got);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("writes 'out' in place only over input 'q'"),
            std::string::npos)
      << status.error_message();
}

TEST_F(ResidentTest, CreateIsIdempotentAndAnotherShapeAlreadyExists) {
  const Tensor x = RandomTensor(DType::kF32, {4, 8}, 3);
  v1::CreateTensorResponse first;
  ASSERT_TRUE(Create(CreateOf("x", x), "tok-alice", &first).ok());
  EXPECT_TRUE(first.created());
  // A retry with other bytes leaves the tensor as it is.
  v1::CreateTensorResponse again;
  ASSERT_TRUE(
      Create(CreateOf("x", RandomTensor(DType::kF32, {4, 8}, 4)), "tok-alice", &again).ok());
  EXPECT_FALSE(again.created());
  EXPECT_EQ(Read("x").tensor().data(), std::string(x.bytes()));
  grpc::Status other = Create(CreateOf("x", RandomTensor(DType::kF32, {4, 9}, 5)));
  EXPECT_EQ(other.error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_NE(other.error_message().find("exists as f32[4,8]"), std::string::npos)
      << other.error_message();
  // Bob's x is another tensor.
  ASSERT_TRUE(Create(CreateOf("x", RandomTensor(DType::kF32, {2}, 6)), "tok-bob").ok());
}

TEST_F(ResidentTest, RowsAndBytesAreWrittenAndReadWhereAsked) {
  const Tensor x = RandomTensor(DType::kF32, {6, 4}, 7);
  ASSERT_TRUE(Create(CreateOf("x", x)).ok());
  const Tensor rows = RandomTensor(DType::kF32, {2, 4}, 8);
  v1::WriteTensorRequest write;
  write.set_name("x");
  write.set_row_offset(3);
  *write.mutable_contents() = ToWire(rows);
  v1::WriteTensorResponse written;
  grpc::Status status = stub_->WriteTensor(As("tok-alice").get(), write, &written);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::string want(x.bytes());
  want.replace(3 * 16, 32, std::string(rows.bytes()));
  EXPECT_EQ(Read("x").tensor().data(), want);
  const v1::ReadTensorResponse middle = Read("x", 3, 2);
  EXPECT_EQ(middle.tensor().data(), std::string(rows.bytes()));
  EXPECT_EQ(std::vector<int64_t>(middle.tensor().shape().begin(), middle.tensor().shape().end()),
            (std::vector<int64_t>{2, 4}));

  write.clear_row_offset();
  write.set_byte_offset(4);
  write.mutable_contents()->Clear();
  write.mutable_contents()->set_data("abcd");
  ASSERT_TRUE(stub_->WriteTensor(As("tok-alice").get(), write, &written).ok());
  want.replace(4, 4, "abcd");
  EXPECT_EQ(Read("x").tensor().data(), want);
}

TEST_F(ResidentTest, BadReferencesGetTheirCodes) {
  const TensorMap inputs = Attention(8, 8, 16, 13);
  ASSERT_TRUE(Create(CreateOf("k", inputs.at("k"))).ok());
  v1::ExecuteResponse got;
  // An unknown tensor.
  v1::ExecuteRequest unknown = AttentionRequest(inputs);
  *(*unknown.mutable_inputs())["k"].mutable_ref() = ResidentRef("nope");
  (*unknown.mutable_inputs())["k"].clear_data();
  grpc::Status status = Execute(unknown, &got);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("input 'k': no resident tensor 'nope'"), std::string::npos)
      << status.error_message();
  // Another identity's tensor is not found either.
  v1::ExecuteRequest theirs = AttentionRequest(inputs);
  *(*theirs.mutable_inputs())["k"].mutable_ref() = ResidentRef("k");
  (*theirs.mutable_inputs())["k"].clear_data();
  EXPECT_EQ(Execute(theirs, &got, "tok-bob").error_code(), StatusCode::NOT_FOUND);
  // A stated dtype that is not the tensor's.
  v1::ExecuteRequest stated = theirs;
  (*stated.mutable_inputs())["k"].set_dtype(v1::DTYPE_F16);
  status = Execute(stated, &got);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("resident tensor 'k' is f32"), std::string::npos)
      << status.error_message();
  // Data and a tensor both.
  v1::ExecuteRequest both = theirs;
  (*both.mutable_inputs())["k"].set_data("xx");
  EXPECT_EQ(Execute(both, &got).error_code(), StatusCode::INVALID_ARGUMENT);
  // An output of another shape.
  ASSERT_TRUE(Create(CreateOf("small", RandomTensor(DType::kF32, {3}, 1))).ok());
  v1::ExecuteRequest wrong_out = AttentionRequest(inputs);
  (*wrong_out.mutable_output_regions())["out"] = ResidentRef("small");
  status = Execute(wrong_out, &got);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("output 'out' is f32[2,8,4,16] but resident tensor"),
            std::string::npos)
      << status.error_message();
  // Writes past the end, reads of rows not there, a bad name, an empty shape.
  v1::WriteTensorRequest write;
  write.set_name("small");
  write.set_byte_offset(8);
  write.mutable_contents()->set_data(std::string(8, 'x'));
  v1::WriteTensorResponse written;
  status = stub_->WriteTensor(As("tok-alice").get(), write, &written);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("8 bytes at byte 8 do not fit its 12 bytes"),
            std::string::npos)
      << status.error_message();
  v1::ReadTensorRequest read;
  read.set_name("small");
  read.set_row_offset(2);
  read.set_rows(2);
  v1::ReadTensorResponse rows;
  EXPECT_EQ(stub_->ReadTensor(As("tok-alice").get(), read, &rows).error_code(),
            StatusCode::INVALID_ARGUMENT);
  v1::CreateTensorRequest bad = CreateOf("has space", RandomTensor(DType::kF32, {2}, 1));
  EXPECT_EQ(Create(bad).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::CreateTensorRequest empty;
  empty.set_name("empty");
  empty.set_dtype(v1::DTYPE_F32);
  empty.add_shape(0);
  EXPECT_EQ(Create(empty).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::CreateTensorRequest short_data = CreateOf("short", RandomTensor(DType::kF32, {4}, 1));
  short_data.mutable_contents()->mutable_data()->resize(8);
  EXPECT_EQ(Create(short_data).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::CreateTensorRequest gpu = CreateOf("gpu", RandomTensor(DType::kF32, {4}, 1));
  gpu.set_device(0);
  status = Create(gpu);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("this server has no GPUs"), std::string::npos);
}

TEST_F(ResidentTest, IdentitiesSeeAndDeleteTheirOwnOnly) {
  ASSERT_TRUE(Create(CreateOf("a", RandomTensor(DType::kF32, {4}, 1)), "tok-alice").ok());
  ASSERT_TRUE(Create(CreateOf("b", RandomTensor(DType::kF32, {4}, 2)), "tok-bob").ok());
  EXPECT_EQ(List("tok-alice").tensors_size(), 1);
  EXPECT_EQ(List("tok-bob").tensors(0).name(), "b");
  EXPECT_EQ(List("tok-ops", "*").tensors_size(), 2);
  v1::ListTensorsRequest theirs;
  theirs.set_owner("alice");
  v1::ListTensorsResponse listed;
  EXPECT_EQ(stub_->ListTensors(As("tok-bob").get(), theirs, &listed).error_code(),
            StatusCode::PERMISSION_DENIED);
  v1::DeleteTensorRequest del;
  del.set_name("a");
  v1::DeleteTensorResponse deleted;
  EXPECT_EQ(stub_->DeleteTensor(As("tok-bob").get(), del, &deleted).error_code(),
            StatusCode::NOT_FOUND);
  v1::ReadTensorRequest read;
  read.set_name("a");
  v1::ReadTensorResponse rows;
  EXPECT_EQ(stub_->ReadTensor(As("tok-bob").get(), read, &rows).error_code(),
            StatusCode::NOT_FOUND);
  ASSERT_TRUE(stub_->DeleteTensor(As("tok-alice").get(), del, &deleted).ok());
  EXPECT_EQ(deleted.deleted(), 1);
  EXPECT_EQ(List("tok-alice").tensors_size(), 0);
}

TEST_F(ResidentTest, CapsRefuseWithTheirNumbers) {
  // 24 MiB each: alice's quota (32 MiB) takes one; bob fills the server's 64 MiB with alice.
  v1::CreateTensorRequest big;
  big.set_dtype(v1::DTYPE_F32);
  big.add_shape(6 << 20);
  big.set_name("big1");
  ASSERT_TRUE(Create(big).ok());
  big.set_name("big2");
  grpc::Status quota = Create(big);
  EXPECT_EQ(quota.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(quota.error_message().find("--quota-resident-bytes=33554432"), std::string::npos)
      << quota.error_message();
  ASSERT_TRUE(Create(big, "tok-bob").ok());
  big.set_name("big3");
  grpc::Status max = Create(big, "tok-ops");
  EXPECT_EQ(max.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(max.error_message().find("--max-resident-bytes=67108864"), std::string::npos)
      << max.error_message();
  // Nothing was evicted.
  EXPECT_EQ(List("tok-ops", "*").tensors_size(), 2);
}

TEST_F(ResidentTest, ATensorInUseIsNeitherDeletedNorTornByAWrite) {
  // A call long enough on the CPU to be caught holding k.
  const TensorMap inputs = Attention(1024, 1024, 64, 21);
  v1::ExecuteResponse want;
  ASSERT_TRUE(Execute(AttentionRequest(inputs), &want).ok());
  ASSERT_TRUE(Create(CreateOf("k", inputs.at("k"))).ok());
  v1::ExecuteRequest request = AttentionRequest(inputs);
  (*request.mutable_inputs())["k"].clear_data();
  *(*request.mutable_inputs())["k"].mutable_ref() = ResidentRef("k");
  v1::ExecuteResponse got;
  grpc::Status call_status;
  std::thread call([&] { call_status = Execute(request, &got); });
  // Wait until the call holds k.
  bool held = false;
  for (int i = 0; i < 2000 && !held; ++i) {
    held = List("tok-alice").tensors(0).calls() > 0;
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(held);
  v1::DeleteTensorRequest del;
  del.set_name("k");
  v1::DeleteTensorResponse deleted;
  grpc::Status refused = stub_->DeleteTensor(As("tok-alice").get(), del, &deleted);
  // The call may have ended just now; when it had not, delete says who holds it.
  if (!refused.ok()) {
    EXPECT_EQ(refused.error_code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(refused.error_message().find("is held by 1 call(s)"), std::string::npos)
        << refused.error_message();
    // A write waits for the call: the call reads k as it was.
    v1::WriteTensorRequest write;
    write.set_name("k");
    *write.mutable_contents() = ToWire(RandomTensor(DType::kF32, {2, 1024, 4, 64}, 99));
    v1::WriteTensorResponse written;
    grpc::Status wrote = stub_->WriteTensor(As("tok-alice").get(), write, &written);
    EXPECT_TRUE(wrote.ok()) << wrote.error_message();
  }
  call.join();
  ASSERT_TRUE(call_status.ok()) << call_status.error_message();
  EXPECT_EQ(got.outputs().at("out").data(), want.outputs().at("out").data());
}

TEST(ResidentExpiryTest, AnIdleTensorExpiresAfterItsTtl) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--resident-ttl=1s", "--max-resident-ttl=2s"}).ok());
  auto stub = MakeStub(server.address());
  v1::CreateTensorRequest create = CreateOf("t", RandomTensor(DType::kF32, {8}, 1));
  create.set_ttl_seconds(100);  // cut to --max-resident-ttl
  v1::CreateTensorResponse created;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->CreateTensor(&context, create, &created).ok());
  EXPECT_EQ(created.tensor().ttl_seconds(), 2u);
  v1::ListTensorsResponse listed;
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext list_context;
    listed.Clear();
    ASSERT_TRUE(stub->ListTensors(&list_context, {}, &listed).ok());
    if (listed.tensors_size() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(listed.tensors_size(), 0);
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_resident_expired_total", {}), 1);
  EXPECT_EQ(MetricSum(*metrics, "kernelserve_resident_created_total", {}), 1);
  // And the call that names it says why it may be gone.
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  (*request.mutable_inputs())["x"].mutable_ref()->set_tensor("t");
  v1::ExecuteResponse response;
  grpc::ClientContext call_context;
  grpc::Status status = stub->Execute(&call_context, request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("expires after its ttl"), std::string::npos)
      << status.error_message();
  absl::StatusOr<int> code = server.Stop();
  EXPECT_TRUE(code.ok() && *code == 0);
}

}  // namespace
}  // namespace kernelserve::testing
