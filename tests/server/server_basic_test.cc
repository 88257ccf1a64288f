// The kernelserve-server binary over gRPC: results, config sources, bad inputs, stream, batch,
// tuning, config admin, limits and auth (TLS: server_tls_test.cc).
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/register.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

// One memory-cache server shared by the tests of this fixture.
class ServerTest : public ::testing::Test {
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

  grpc::Status Execute(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub_->Execute(&context, request, response);
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
ServerProcess* ServerTest::server_ = nullptr;

void ExpectMatchesReference(const v1::ExecuteResponse& response, const Tensor& x) {
  ASSERT_TRUE(response.outputs().contains("out"));
  const v1::Tensor& out = response.outputs().at("out");
  EXPECT_EQ(out.dtype(), v1::DTYPE_F32);
  ASSERT_EQ(out.shape_size(), 2);
  EXPECT_EQ(out.shape(0), x.dim(0));
  EXPECT_EQ(out.shape(1), x.dim(2));
  AllCloseResult close = AllClose(WireDoubles(out), MeanPoolingReference(x), kRtol, kAtol);
  EXPECT_TRUE(close.ok) << close.message;
}

TEST_F(ServerTest, ResultEqualsReferenceAndSecondCallHitsMemory) {
  const Tensor x = RandomTensor(DType::kF32, {3, 37, 64}, 11);
  v1::ExecuteResponse first;
  grpc::Status status = Execute(MeanPoolingRequest(x, "req-1"), &first);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectMatchesReference(first, x);
  EXPECT_EQ(first.request_id(), "req-1");
  EXPECT_EQ(first.config_source(), v1::CONFIG_SOURCE_HEURISTIC);
  EXPECT_EQ(first.platform(), "cpu");
  EXPECT_EQ(first.device(), -1);
  EXPECT_FALSE(first.cache_key().empty());
  EXPECT_GE(first.timing().total_us(), first.timing().kernel_us());

  v1::ExecuteResponse second;
  status = Execute(MeanPoolingRequest(x, "req-2"), &second);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectMatchesReference(second, x);
  EXPECT_EQ(second.config_source(), v1::CONFIG_SOURCE_MEMORY);
  EXPECT_EQ(second.cache_key(), first.cache_key());
  EXPECT_EQ(FromProto(second.config()), FromProto(first.config()));
}

// A mean_pooling request for a random x of `shape`, then changed by `edit`.
template <typename Edit>
v1::ExecuteRequest EditedRequest(Edit edit) {
  v1::ExecuteRequest request = MeanPoolingRequest(RandomTensor(DType::kF32, {2, 4, 8}, 5));
  edit(request);
  return request;
}

TEST_F(ServerTest, EachBadInputAnswersInvalidArgumentNamingIt) {
  struct Case {
    std::string name;
    v1::ExecuteRequest request;
    std::string expected_text;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"unknown kernel", EditedRequest([](auto& r) { r.set_kernel("pooling_x"); }), "pooling_x"});
  cases.push_back(
      {"missing input", EditedRequest([](auto& r) { r.mutable_inputs()->clear(); }), "'x'"});
  cases.push_back({"extra input",
                   EditedRequest([](auto& r) { (*r.mutable_inputs())["y"] = r.inputs().at("x"); }),
                   "'y'"});
  cases.push_back({"dtype unspecified", EditedRequest([](auto& r) {
                     (*r.mutable_inputs())["x"].set_dtype(v1::DTYPE_UNSPECIFIED);
                   }),
                   "input 'x'"});
  cases.push_back(
      {"wrong dtype", EditedRequest([](auto& r) {
         (*r.mutable_inputs())["x"] = ToWire(RandomTensor(DType::kI32, {2, 4, 8}, 1, 0, 9));
       }),
       "input 'x'"});
  cases.push_back({"wrong rank", EditedRequest([](auto& r) {
                     (*r.mutable_inputs())["x"] = ToWire(RandomTensor(DType::kF32, {8, 8}, 2));
                   }),
                   "input 'x'"});
  cases.push_back({"size mismatch", EditedRequest([](auto& r) {
                     (*r.mutable_inputs())["x"].mutable_data()->pop_back();
                   }),
                   "input 'x'"});
  cases.push_back({"negative dim",
                   EditedRequest([](auto& r) { (*r.mutable_inputs())["x"].set_shape(1, -4); }),
                   "input 'x'"});
  cases.push_back({"shape overflow", EditedRequest([](auto& r) {
                     v1::Tensor& x = (*r.mutable_inputs())["x"];
                     x.set_shape(0, int64_t{1} << 40);
                     x.set_shape(1, int64_t{1} << 40);
                   }),
                   "input 'x'"});
  cases.push_back({"bad cu_seqlens", EditedRequest([](auto& r) {
                     (*r.mutable_inputs())["x"] = ToWire(RandomTensor(DType::kF32, {10, 8}, 3));
                     (*r.mutable_inputs())["cu_seqlens"] =
                         ToWire(Tensor::FromInts(DType::kI32, {3}, {0, 6, 4}));
                   }),
                   "cu_seqlens"});
  cases.push_back({"params of another kernel",
                   EditedRequest([](auto& r) { r.mutable_flash_attention()->set_causal(true); }),
                   "params"});
  cases.push_back(
      {"device not served", EditedRequest([](auto& r) { r.set_device(3); }), "device 3"});
  v1::ExecuteRequest gqa;
  gqa.set_kernel("flash_attention");
  (*gqa.mutable_inputs())["q"] = ToWire(RandomTensor(DType::kF32, {1, 4, 3, 8}, 1));
  (*gqa.mutable_inputs())["k"] = ToWire(RandomTensor(DType::kF32, {1, 4, 2, 8}, 2));
  (*gqa.mutable_inputs())["v"] = ToWire(RandomTensor(DType::kF32, {1, 4, 2, 8}, 3));
  cases.push_back({"Hq % Hkv != 0", gqa, "'k'"});

  for (const Case& c : cases) {
    v1::ExecuteResponse response;
    grpc::Status status = Execute(c.request, &response);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.expected_text), std::string::npos)
        << c.name << ": " << status.error_message();
  }
  // The server is still up and serving.
  v1::ExecuteResponse ok;
  EXPECT_TRUE(Execute(MeanPoolingRequest(RandomTensor(DType::kF32, {1, 2, 3}, 9)), &ok).ok());
}

// fp8 travels the wire, but no kernel computes in it: mean_pooling refuses x as either fp8
// dtype with the exact schema message, naming the input and the dtypes it takes.
TEST_F(ServerTest, AnFp8InputIsRefusedNamingTheInputAndTheDtypesItTakes) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    const Tensor x = RandomTensor(dtype, {2, 4, 8}, 5);
    ASSERT_EQ(x.nbytes(), 64u);
    v1::ExecuteResponse response;
    grpc::Status status = Execute(MeanPoolingRequest(x), &response);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_EQ(status.error_message(),
              "input 'x': dtype " + std::string(DTypeName(dtype)) + ": expected f32|f16|bf16");
  }
  // The server is still up and serving.
  v1::ExecuteResponse ok;
  EXPECT_TRUE(Execute(MeanPoolingRequest(RandomTensor(DType::kF32, {1, 2, 3}, 9)), &ok).ok());
}

TEST_F(ServerTest, StreamAnswersBadItemsInBandAndGoesOn) {
  grpc::ClientContext context;
  auto stream = stub_->ExecuteStream(&context);
  const Tensor a = RandomTensor(DType::kF32, {2, 5, 16}, 21);
  const Tensor c = RandomTensor(DType::kF32, {1, 9, 16}, 22);
  v1::ExecuteRequest bad = MeanPoolingRequest(a, "b");
  (*bad.mutable_inputs())["x"].set_dtype(v1::DTYPE_UNSPECIFIED);
  ASSERT_TRUE(stream->Write(MeanPoolingRequest(a, "a")));
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(MeanPoolingRequest(c, "c")));
  ASSERT_TRUE(stream->WritesDone());
  std::map<std::string, v1::ExecuteResponse> by_id;
  v1::ExecuteResponse response;
  while (stream->Read(&response)) by_id[response.request_id()] = response;
  grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(by_id.size(), 3u);
  EXPECT_EQ(by_id["a"].status().code(), 0);
  ExpectMatchesReference(by_id["a"], a);
  EXPECT_EQ(by_id["b"].status().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(by_id["b"].status().message().find("input 'x'"), std::string::npos);
  EXPECT_EQ(by_id["c"].status().code(), 0);
  ExpectMatchesReference(by_id["c"], c);
}

TEST_F(ServerTest, BatchRunsEveryItemWithOneConfig) {
  v1::ExecuteBatchRequest request;
  request.set_kernel("mean_pooling");
  request.set_request_id("batch");
  std::vector<Tensor> xs;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(RandomTensor(DType::kF32, {2, 12, 24}, 30 + static_cast<uint64_t>(i)));
    v1::ExecuteRequest* item = request.add_items();
    (*item->mutable_inputs())["x"] = ToWire(xs.back());
    item->set_request_id("item" + std::to_string(i));
  }
  v1::ExecuteRequest* bad = request.add_items();
  (*bad->mutable_inputs())["x"] = ToWire(xs[0]);
  (*bad->mutable_inputs())["x"].mutable_data()->resize(5);
  v1::ExecuteBatchResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->ExecuteBatch(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.request_id(), "batch");
  ASSERT_EQ(response.items_size(), 4);
  for (int i = 0; i < 3; ++i) {
    const v1::ExecuteResponse& item = response.items(i);
    EXPECT_EQ(item.status().code(), 0) << item.status().message();
    EXPECT_EQ(item.request_id(), "item" + std::to_string(i));
    EXPECT_EQ(FromProto(item.config()), FromProto(response.config()));
    ExpectMatchesReference(item, xs[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(response.items(3).status().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
}

TEST_F(ServerTest, AutotuneFromShapesOnlyThenExecuteHitsMemory) {
  v1::AutotuneRequest request;
  request.set_kernel("mean_pooling");
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int64_t d : {2, 64, 48}) x.add_shape(d);
  v1::AutotuneResponse tuned;
  grpc::ClientContext context;
  grpc::Status status = stub_->Autotune(&context, request, &tuned);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tuned.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_GT(tuned.candidates_size(), 1);
  EXPECT_GT(tuned.best_us(), 0.0);

  const Tensor data = RandomTensor(DType::kF32, {2, 64, 48}, 41);
  v1::ExecuteResponse run;
  status = Execute(MeanPoolingRequest(data), &run);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(run.config_source(), v1::CONFIG_SOURCE_MEMORY);
  EXPECT_EQ(run.cache_key(), tuned.cache_key());
  EXPECT_EQ(FromProto(run.config()), FromProto(tuned.best()));
  ExpectMatchesReference(run, data);
}

TEST_F(ServerTest, PinnedConfigIsUsedListedAndDeleted) {
  const Tensor x = RandomTensor(DType::kF32, {4, 20, 40}, 51);
  v1::PutConfigRequest put;
  put.set_kernel("mean_pooling");
  v1::Tensor& spec = (*put.mutable_inputs())["x"];
  spec.set_dtype(v1::DTYPE_F32);
  for (int64_t d : x.shape()) spec.add_shape(d);
  put.mutable_config()->set_block_size(128);
  (*put.mutable_config()->mutable_fields())["threads"] = 1;
  put.mutable_config()->set_platform("cpu");
  v1::PutConfigResponse pinned;
  {
    grpc::ClientContext context;
    grpc::Status status = stub_->PutConfig(&context, put, &pinned);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  v1::ExecuteResponse run;
  ASSERT_TRUE(Execute(MeanPoolingRequest(x), &run).ok());
  EXPECT_EQ(run.cache_key(), pinned.cache_key());
  EXPECT_EQ(run.config_source(), v1::CONFIG_SOURCE_MEMORY);
  EXPECT_EQ(run.config().block_size(), 128);
  ExpectMatchesReference(run, x);

  v1::ListConfigsRequest list;
  list.set_kernel("mean_pooling");
  v1::ListConfigsResponse listed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ListConfigs(&context, list, &listed).ok());
  }
  bool found = false;
  for (const v1::ConfigEntry& e : listed.entries()) {
    EXPECT_EQ(e.kernel().rfind("mean_pooling", 0), 0u) << e.kernel();
    found = found || (e.cache_key() == pinned.cache_key() && e.config().block_size() == 128);
    if (e.cache_key() == pinned.cache_key()) {  // every tier names the device
      EXPECT_EQ(e.device_fingerprint(), pinned.device_fingerprint()) << e.tier();
    }
  }
  EXPECT_TRUE(found);

  v1::DeleteConfigRequest del;
  del.set_cache_key(pinned.cache_key());
  del.set_device_fingerprint("not-a-fingerprint");
  v1::DeleteConfigResponse deleted;
  {
    // Another device's config of this key: there is none, and the pinned one stays.
    grpc::ClientContext context;
    grpc::Status status = stub_->DeleteConfig(&context, del, &deleted);
    EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
    EXPECT_NE(status.error_message().find(pinned.cache_key()), std::string::npos);
    EXPECT_NE(status.error_message().find("not-a-fingerprint"), std::string::npos);
  }
  del.set_device_fingerprint(pinned.device_fingerprint());
  {
    grpc::ClientContext context;
    grpc::Status status = stub_->DeleteConfig(&context, del, &deleted);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  {
    grpc::ClientContext context;
    EXPECT_EQ(stub_->DeleteConfig(&context, del, &deleted).error_code(), StatusCode::NOT_FOUND);
  }
  v1::ExecuteResponse after;
  ASSERT_TRUE(Execute(MeanPoolingRequest(x), &after).ok());
  EXPECT_EQ(after.config_source(), v1::CONFIG_SOURCE_HEURISTIC);
}

// Each kernel lists one config schema per platform, in the order of its platforms; the cpu
// platform's worker threads are the named field "threads".
void ExpectConfigSchemasListed(const v1::ListKernelsResponse& kernels) {
  for (const v1::KernelInfo& k : kernels.kernels()) {
    ASSERT_EQ(k.config_schemas_size(), k.platforms_size()) << k.name();
    for (int i = 0; i < k.platforms_size(); ++i) {
      EXPECT_EQ(k.config_schemas(i).platform(), k.platforms(i)) << k.name();
    }
    const v1::PlatformConfigInfo& cpu = k.config_schemas(0);
    ASSERT_EQ(cpu.platform(), "cpu") << k.name();
    std::vector<std::string> names;
    for (const v1::ConfigFieldInfo& field : cpu.fields()) names.push_back(field.name());
    const bool attention = k.name().starts_with("flash_attention");
    const bool paged = k.name() == "paged_attention";  // its cpu platform has threads alone
    const std::vector<std::string> expected =
        paged       ? std::vector<std::string>{"threads"}
        : attention ? std::vector<std::string>{"block_q", "block_k", "threads"}
                    : std::vector<std::string>{"block_size", "threads"};
    EXPECT_EQ(names, expected) << k.name();
    const v1::ConfigFieldInfo& threads = cpu.fields(cpu.fields_size() - 1);
    EXPECT_EQ(threads.kind(), "int");
    EXPECT_EQ(threads.min(), 0);
    EXPECT_EQ(threads.max(), 1024);
    EXPECT_TRUE(threads.named());
    EXPECT_EQ(threads.default_value(), "0: one per hardware thread");
    EXPECT_EQ(threads.doc(), "the cpu platform's worker threads");
    if (!paged) {
      EXPECT_FALSE(cpu.fields(0).named());
    }
  }
}

// A config names the cpu platform's threads as the named field "threads"; the fields that meant
// other things before config schema 2 are refused, naming what replaced them.
TEST_F(ServerTest, ConfigNamedFieldsAreTakenAndOldMeaningsRefused) {
  const Tensor x = RandomTensor(DType::kF32, {2, 6, 8}, 61);
  v1::ExecuteRequest request = MeanPoolingRequest(x);
  request.mutable_config()->set_block_size(2);
  (*request.mutable_config()->mutable_fields())["threads"] = 2;
  v1::ExecuteResponse response;
  ASSERT_TRUE(Execute(request, &response).ok());
  EXPECT_EQ(response.config_source(), v1::CONFIG_SOURCE_OVERRIDE);
  EXPECT_EQ(response.config().fields().at("threads"), 2);

  v1::ExecuteRequest old = MeanPoolingRequest(x);
  old.mutable_config()->set_num_warps(2);
  grpc::Status status = Execute(old, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("num_warps is not a field of mean_pooling on cpu; the "
                                        "field for the cpu platform's worker threads is "
                                        "'threads' (0..1024)"),
            std::string::npos)
      << status.error_message();

  v1::ExecuteRequest backend = MeanPoolingRequest(x);
  backend.mutable_config()->set_backend("wmma");
  status = Execute(backend, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("backend is no longer a config field"), std::string::npos)
      << status.error_message();

  v1::ExecuteRequest unknown = MeanPoolingRequest(x);
  (*unknown.mutable_config()->mutable_fields())["lanes"] = 4;
  status = Execute(unknown, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "config 'lanes'=4: not a field of mean_pooling on cpu (its fields: block_size, "
                "threads)"),
            std::string::npos)
      << status.error_message();
}

TEST_F(ServerTest, ListsKernelsAndDescribesItself) {
  v1::ListKernelsResponse kernels;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok());
  }
  std::vector<std::string> names;
  for (const v1::KernelInfo& k : kernels.kernels()) names.push_back(k.id());
  EXPECT_EQ(names, (std::vector<std::string>{"flash_attention@v1", "flash_attention_bwd@v1",
                                             "mean_pooling@v1", "mean_pooling_bwd@v1",
                                             "paged_attention@v1"}));
  // Each forward names its VJP kernel and the backward its forward; x of mean_pooling_bwd is
  // shape-only.
  std::map<std::string, std::pair<std::string, std::string>> pairs;
  for (const v1::KernelInfo& k : kernels.kernels()) pairs[k.name()] = {k.vjp(), k.vjp_of()};
  EXPECT_EQ(pairs["mean_pooling"], std::make_pair(std::string("mean_pooling_bwd"), std::string()));
  EXPECT_EQ(pairs["mean_pooling_bwd"], std::make_pair(std::string(), std::string("mean_pooling")));
  EXPECT_EQ(pairs["flash_attention"].first, "flash_attention_bwd");
  EXPECT_EQ(pairs["flash_attention_bwd"].second, "flash_attention");
  for (const v1::KernelInfo& k : kernels.kernels()) {
    for (const v1::InputInfo& input : k.input_schema()) {
      EXPECT_EQ(input.shape_only(), k.name() == "mean_pooling_bwd" && input.name() == "x")
          << k.name() << " " << input.name();
    }
  }
  v1::ServerInfo info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  }
  ASSERT_GE(info.devices_size(), 1);
  ExpectConfigSchemasListed(kernels);
  EXPECT_EQ(info.devices(0).device(), -1);
  EXPECT_EQ(info.devices(0).fingerprint().size(), 16u);
  EXPECT_GT(info.devices(0).memory_total_bytes(), 0);
  EXPECT_EQ(info.store(), "memory (none)");
  EXPECT_EQ(info.max_message_bytes(), int64_t{1} << 30);
  EXPECT_EQ(info.autotune_budget_ms(), 30000);  // --autotune-budget's default
  // cuDNN as this process finds it (the server loads it the same way); flash_attention and
  // flash_attention_bwd list the cudnn platform exactly when it is loaded.
  EXPECT_EQ(info.cudnn_version(), LoadedCudnnVersion());
  std::vector<std::string> listed_cudnn;
  for (const v1::KernelInfo& kernel : kernels.kernels()) {
    for (const std::string& platform : kernel.platforms()) {
      if (platform == "cudnn") listed_cudnn.push_back(kernel.name());
    }
  }
  const std::vector<std::string> expected =
      info.cudnn_version() == "none"
          ? std::vector<std::string>{}
          : std::vector<std::string>{"flash_attention", "flash_attention_bwd"};
  EXPECT_EQ(listed_cudnn, expected) << info.cudnn_version();
  ASSERT_TRUE(HealthStatus(server_->address(), "").ok());
  EXPECT_EQ(*HealthStatus(server_->address(), ""), 1);
  EXPECT_EQ(*HealthStatus(server_->address(), "kernelserve.v1.KernelService"), 1);
}

TEST_F(ServerTest, BackwardTakesAShapeOnlyInputTheForwardRefuses) {
  // mean_pooling_bwd with x sent by dtype and shape alone: dx = dout / S on every row.
  const Tensor dout = RandomTensor(DType::kF32, {2, 8}, 21);
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling_bwd");
  PutTensor(dout, &(*request.mutable_inputs())["dout"]);
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int64_t dim : {2, 5, 8}) x.add_shape(dim);
  v1::ExecuteResponse response;
  grpc::Status status = Execute(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(response.outputs().contains("dx"));
  const v1::Tensor& dx = response.outputs().at("dx");
  EXPECT_EQ(std::vector<int64_t>(dx.shape().begin(), dx.shape().end()),
            (std::vector<int64_t>{2, 5, 8}));
  const std::vector<double> got = WireDoubles(dx);
  ASSERT_EQ(got.size(), 80u);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 5; ++s) {
      for (int64_t h = 0; h < 8; ++h) {
        EXPECT_EQ(got[(b * 5 + s) * 8 + h], static_cast<double>(dout.GetFloat(b * 8 + h) / 5.0f));
      }
    }
  }
  // The same x without data to the forward, and dout without data: each names the input.
  v1::ExecuteRequest forward;
  forward.set_kernel("mean_pooling");
  (*forward.mutable_inputs())["x"] = x;
  status = Execute(forward, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("input 'x'"), std::string::npos) << status.error_message();
  (*request.mutable_inputs())["dout"].clear_data();
  status = Execute(request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("input 'dout'"), std::string::npos)
      << status.error_message();
}

TEST(ServerFileStoreTest, RestartedServerReportsFile) {
  const std::string path = MakeTempDir("file-store") + "/configs.json";
  const Tensor x = RandomTensor(DType::kF32, {2, 30, 20}, 61);
  std::string first_key;
  for (int round = 0; round < 2; ++round) {
    ServerProcess server;
    ASSERT_TRUE(server.Start({"--cache=file:" + path}).ok());
    EXPECT_NE(server.startup_line().find(path), std::string::npos) << server.startup_line();
    auto stub = MakeStub(server.address());
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->Execute(&context, MeanPoolingRequest(x), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectMatchesReference(response, x);
    if (round == 0) {
      EXPECT_EQ(response.config_source(), v1::CONFIG_SOURCE_HEURISTIC);
      first_key = response.cache_key();
    } else {
      EXPECT_EQ(response.config_source(), v1::CONFIG_SOURCE_FILE);
      EXPECT_EQ(response.cache_key(), first_key);
    }
    absl::StatusOr<int> code = server.Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }
}

TEST(ServerUnixSocketTest, ListensOnAUnixSocketAndNamesIt) {
  const std::string target = "unix:" + MakeTempDir("unix-socket") + "/kernelserve.sock";
  ServerProcess server;
  absl::Status started = server.Start({"--cache=memory", "--listen=" + target});
  ASSERT_TRUE(started.ok()) << started;
  EXPECT_NE(server.startup_line().find("listening on " + target + " ("), std::string::npos)
      << server.startup_line();
  ASSERT_EQ(server.address(), target);
  const Tensor x = RandomTensor(DType::kF32, {2, 9, 33}, 67);
  v1::ExecuteResponse response;
  grpc::ClientContext context;
  grpc::Status status = MakeStub(target)->Execute(&context, MeanPoolingRequest(x), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectMatchesReference(response, x);
  absl::StatusOr<int> code = server.Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(ServerLimitsTest, OversizeMessageAndInflightBytesAreResourceExhausted) {
  ServerProcess server;
  ASSERT_TRUE(
      server.Start({"--cache=memory", "--max-message-bytes=1048576", "--max-inflight-bytes=65536"})
          .ok());
  auto stub = MakeStub(server.address());
  // 2 MiB of x: over the message limit.
  {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->Execute(
        &context, MeanPoolingRequest(RandomTensor(DType::kF32, {1, 512, 1024}, 71)), &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  }
  // 128 KiB: under the message limit, over the in-flight byte budget: refused as it arrives.
  {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->Execute(
        &context, MeanPoolingRequest(RandomTensor(DType::kF32, {1, 32, 1024}, 72)), &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_NE(status.error_message().find("larger than max"), std::string::npos)
        << status.error_message();
  }
  // 48 KiB with 48 KiB of output: under the message limit, but the call's received bytes and
  // outputs pass the budget.
  {
    v1::ExecuteRequest request;
    request.set_kernel("flash_attention");
    for (const char* name : {"q", "k", "v"}) {
      (*request.mutable_inputs())[name] = ToWire(RandomTensor(DType::kF32, {1, 64, 1, 64}, 74));
    }
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->Execute(&context, request, &response);
    EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_NE(status.error_message().find("--max-inflight-bytes=65536"), std::string::npos)
        << status.error_message();
  }
  // Small requests still run.
  {
    const Tensor x = RandomTensor(DType::kF32, {1, 8, 256}, 73);
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Execute(&context, MeanPoolingRequest(x), &response).ok());
    ExpectMatchesReference(response, x);
  }
  EXPECT_EQ(*server.Stop(), 0);
}

TEST(ServerAuthTest, MissingOrWrongTokenIsUnauthenticatedHealthIsOpen) {
  const std::string file = MakeTempDir("auth") + "/token";
  std::ofstream(file) << "s3cret-token\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--auth-token-file=" + file}).ok());
  auto stub = MakeStub(server.address());
  const Tensor x = RandomTensor(DType::kF32, {1, 4, 8}, 81);
  for (const std::string& token :
       {std::string(), std::string("wrong-token"), std::string("s3cret-token-longer")}) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::ExecuteResponse response;
    EXPECT_EQ(stub->Execute(&context, MeanPoolingRequest(x), &response).error_code(),
              StatusCode::UNAUTHENTICATED)
        << token;
  }
  {
    grpc::ClientContext context;
    v1::ServerInfo info;
    EXPECT_EQ(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).error_code(),
              StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer s3cret-token");
    v1::ExecuteResponse response;
    grpc::Status status = stub->Execute(&context, MeanPoolingRequest(x), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectMatchesReference(response, x);
  }
  absl::StatusOr<int> health = HealthStatus(server.address(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, 1);
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
