// CUDA shared memory of kernelserve-server on a real GPU: a separate client process exports a
// buffer (kernelserve-ipc-exporter), this test opens it too to write inputs and read outputs,
// and the server computes in place. Results equal the same calls with inline bytes bit for bit
// and the CPU reference within tolerance; bad handles get their codes; a client that dies
// leaves a server that unregisters and keeps serving. Skips where the server sees no GPU.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string ExporterBinary() {
  const char* other = std::getenv("KERNELSERVE_IPC_EXPORTER");
  return other != nullptr && *other != '\0' ? other : KERNELSERVE_IPC_EXPORTER_BINARY;
}

// A kernelserve-ipc-exporter process holding `bytes` bytes of GPU 0 (0xff), and its handle.
class Exporter {
 public:
  explicit Exporter(uint64_t bytes) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      const std::string binary = ExporterBinary();
      const std::string size = std::to_string(bytes);
      execl(binary.c_str(), binary.c_str(), size.c_str(), "0", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    FILE* out = fdopen(from_child[0], "r");
    char line[256] = {};
    if (out != nullptr && std::fgets(line, sizeof(line), out) != nullptr) {
      for (size_t i = 0; i + 1 < std::strlen(line) && line[i] != '\n'; i += 2) {
        handle_.push_back(static_cast<char>(std::stoi(std::string(line + i, 2), nullptr, 16)));
      }
    }
    if (out != nullptr) std::fclose(out);
  }
  ~Exporter() { Kill(/*gently=*/true); }
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // The raw cudaIpcMemHandle_t ("" when the process failed).
  const std::string& handle() const { return handle_; }
  // Ends the process: closing its stdin (it frees the buffer) or SIGKILL (a crashed client).
  void Kill(bool gently) {
    if (pid_ <= 0) return;
    if (!gently) kill(pid_, SIGKILL);
    close(stdin_);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string handle_;
};

// The exporter's buffer as this process maps it (to write inputs and read outputs).
class Mapped {
 public:
  explicit Mapped(const std::string& handle) {
    cudaIpcMemHandle_t h{};
    if (handle.size() != sizeof(h)) return;
    std::memcpy(&h, handle.data(), sizeof(h));
    if (cudaIpcOpenMemHandle(&base_, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      base_ = nullptr;
    }
  }
  ~Mapped() {
    if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
  }
  bool ok() const { return base_ != nullptr; }
  void* base() const { return base_; }
  void Write(uint64_t offset, const Tensor& t) const {
    ASSERT_EQ(cudaMemcpy(static_cast<char*>(base_) + offset, t.data(), t.nbytes(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  Tensor Read(uint64_t offset, DType dtype, const Shape& shape) const {
    Tensor t = Tensor::Empty(dtype, shape);
    EXPECT_EQ(cudaMemcpy(t.data(), static_cast<char*>(base_) + offset, t.nbytes(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return t;
  }

 private:
  void* base_ = nullptr;
};

// Input `name` of `request` as a reference to `t` written at `offset` of `mapped`.
void PutRef(const Mapped& mapped, v1::ExecuteRequest* request, const std::string& name,
            const Tensor& t, uint64_t offset) {
  mapped.Write(offset, t);
  v1::Tensor& wire = (*request->mutable_inputs())[name];
  wire.Clear();
  wire.set_dtype(ToProto(t.dtype()));
  for (int64_t d : t.shape()) wire.add_shape(d);
  *wire.mutable_ref() = RegionRef("ipc", offset, t.nbytes());
}

grpc::Status Call(v1::KernelService::Stub& stub, const v1::ExecuteRequest& request,
                  v1::ExecuteResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub.Execute(&context, request, response);
}

grpc::Status RegisterCuda(v1::KernelService::Stub& stub, const std::string& name,
                          const std::string& handle, int device, uint64_t bytes) {
  v1::RegisterCudaSharedMemoryRequest request;
  request.set_name(name);
  request.set_raw_handle(handle);
  request.set_device(device);
  request.set_byte_size(bytes);
  v1::RegisterSharedMemoryResponse response;
  grpc::ClientContext context;
  return stub.RegisterCudaSharedMemory(&context, request, &response);
}

grpc::StatusCode Unregister(v1::KernelService::Stub& stub, const std::string& name) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  v1::UnregisterSharedMemoryResponse response;
  grpc::ClientContext context;
  return stub.UnregisterSharedMemory(&context, request, &response).error_code();
}

Tensor WireOut(v1::ExecuteResponse& response, const std::string& name) {
  absl::StatusOr<Tensor> t = TakeTensor(&(*response.mutable_outputs())[name], name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : Tensor();
}

#define START_GPU_SERVER(server)                                                     \
  ServerProcess server;                                                              \
  ASSERT_TRUE(server.Start({"--cache=memory"}).ok());                                \
  if (!absl::StrContains(server.startup_line(), "cuda:0")) {                         \
    GTEST_SKIP() << "no GPU: " << server.startup_line();                             \
  }                                                                                  \
  ASSERT_TRUE(absl::StrContains(server.startup_line(), "shared memory system cuda")) \
      << "CUDA shared memory off: " << server.startup_line();

TEST(ServerCudaIpcTest, KernelsComputeInPlaceAndMatchInlineCalls) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  Exporter exporter(64 * kMiB);
  ASSERT_EQ(exporter.handle().size(), 64u) << "the exporter did not start";
  Mapped mapped(exporter.handle());
  ASSERT_TRUE(mapped.ok());
  ASSERT_TRUE(RegisterCuda(*stub, "ipc", exporter.handle(), 0, 64 * kMiB).ok());

  // Attention with grouped heads and odd lengths: q, v and out in the region, k inline.
  const Tensor q = RandomTensor(DType::kF16, {2, 301, 4, 128}, 1, -1.0f, 1.0f);
  const Tensor k = RandomTensor(DType::kF16, {2, 257, 2, 128}, 2, -1.0f, 1.0f);
  const Tensor v = RandomTensor(DType::kF16, {2, 257, 2, 128}, 3, -1.0f, 1.0f);
  v1::ExecuteRequest inline_request;
  inline_request.set_kernel("flash_attention");
  inline_request.mutable_flash_attention()->set_causal(true);
  inline_request.mutable_flash_attention()->set_return_lse(true);
  (*inline_request.mutable_inputs())["q"] = ToWire(q);
  (*inline_request.mutable_inputs())["k"] = ToWire(k);
  (*inline_request.mutable_inputs())["v"] = ToWire(v);
  v1::ExecuteRequest shared = inline_request;
  PutRef(mapped, &shared, "q", q, 0);
  PutRef(mapped, &shared, "v", v, 4 * kMiB);
  (*shared.mutable_output_regions())["out"] = RegionRef("ipc", 8 * kMiB, q.nbytes());
  v1::ExecuteResponse in_place;
  grpc::Status status = Call(*stub, shared, &in_place);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(in_place.device(), 0) << "placed where the region is";
  EXPECT_TRUE(in_place.outputs().at("out").data().empty());
  const Tensor out = mapped.Read(8 * kMiB, DType::kF16, q.shape());
  inline_request.set_device(0);
  inline_request.set_platform(in_place.platform());
  *inline_request.mutable_config() = in_place.config();
  v1::ExecuteResponse plain;
  ASSERT_TRUE(Call(*stub, inline_request, &plain).ok());
  EXPECT_EQ(out.bytes(), WireOut(plain, "out").bytes()) << "in place == inline, bit for bit";
  EXPECT_EQ(WireOut(in_place, "lse").bytes(), WireOut(plain, "lse").bytes());
  inline_request.set_platform("cpu");
  inline_request.clear_device();
  inline_request.clear_config();
  v1::ExecuteResponse on_cpu;
  ASSERT_TRUE(Call(*stub, inline_request, &on_cpu).ok());
  EXPECT_LE(RelativeError(out, WireOut(on_cpu, "out")), 5e-3);

  // Varlen pooling: x and out in the region, cu_seqlens (index data) in it too.
  const Tensor x = RandomTensor(DType::kF32, {1000, 96}, 4, -1.0f, 1.0f);
  const Tensor cu = Tensor::FromInts(DType::kI32, {4}, {0, 1, 400, 1000});
  v1::ExecuteRequest pool;
  pool.set_kernel("mean_pooling");
  PutRef(mapped, &pool, "x", x, 16 * kMiB);
  PutRef(mapped, &pool, "cu_seqlens", cu, 20 * kMiB);
  (*pool.mutable_output_regions())["out"] = RegionRef("ipc", 21 * kMiB, 3 * 96 * 4);
  v1::ExecuteResponse pooled;
  status = Call(*stub, pool, &pooled);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const Tensor pool_out = mapped.Read(21 * kMiB, DType::kF32, {3, 96});
  const std::vector<double> xs = x.ToDoubles();
  std::vector<double> expected(3 * 96, 0.0);
  const int64_t bounds[] = {0, 1, 400, 1000};
  for (int n = 0; n < 3; ++n) {
    for (int64_t r = bounds[n]; r < bounds[n + 1]; ++r) {
      for (int h = 0; h < 96; ++h) {
        expected[n * 96 + h] += xs[r * 96 + h] / static_cast<double>(bounds[n + 1] - bounds[n]);
      }
    }
  }
  AllCloseResult close = AllClose(pool_out.ToDoubles(), expected, 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;

  // Listed as a CUDA region; on the CPU refused; gone after Unregister.
  v1::SharedMemoryStatusResponse listed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->SharedMemoryStatus(&context, {}, &listed).ok());
  }
  ASSERT_EQ(listed.regions_size(), 1);
  EXPECT_EQ(listed.regions(0).kind(), "cuda");
  EXPECT_EQ(listed.regions(0).device(), 0);
  pool.set_platform("cpu");
  v1::ExecuteResponse refused;
  EXPECT_EQ(Call(*stub, pool, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pool.clear_platform();
  EXPECT_EQ(Unregister(*stub, "ipc"), grpc::StatusCode::OK);
  EXPECT_EQ(Call(*stub, pool, &refused).error_code(), grpc::StatusCode::NOT_FOUND);
}

// The C++ client's helper: SharedMemoryRegion::RegisterCuda, GPU views as inputs and outputs.
TEST(ServerCudaIpcTest, TheClientsCudaRegionRunsTypedCalls) {
  START_GPU_SERVER(server);
  Exporter exporter(4 * kMiB);
  ASSERT_EQ(exporter.handle().size(), 64u);
  Mapped mapped(exporter.handle());
  ASSERT_TRUE(mapped.ok());
  ClientOptions options;
  options.target = server.address();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region = SharedMemoryRegion::RegisterCuda(
      **client, "typed", exporter.handle(), mapped.base(), 4 * kMiB, 0);
  ASSERT_TRUE(region.ok()) << region.status();
  const Tensor x = RandomTensor(DType::kF16, {3, 77, 256}, 6, -1.0f, 1.0f);
  mapped.Write(0, x);
  absl::StatusOr<Tensor> x_view = (*region)->View(0, DType::kF16, x.shape());
  absl::StatusOr<Tensor> out_view = (*region)->View(2 * kMiB, DType::kF16, {3, 256});
  ASSERT_TRUE(x_view.ok() && out_view.ok());
  EXPECT_EQ(x_view->device(), 0);
  EXPECT_EQ((*region)->Put(0, x).status().code(), absl::StatusCode::kFailedPrecondition);
  MeanPoolingOptions shared;
  shared.run.regions = {region->get()};
  shared.run.outputs["out"] = *out_view;
  absl::StatusOr<RunResult> r = (*client)->MeanPooling(*x_view, shared);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs.at("out").device(), 0);
  absl::StatusOr<RunResult> plain = (*client)->MeanPooling(x);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const Tensor out = mapped.Read(2 * kMiB, DType::kF16, {3, 256});
  EXPECT_LE(RelativeError(out, plain->outputs.at("out")), 5e-3);
  region->reset();  // unregisters; the buffer stays the exporter's
  v1::SharedMemoryStatusResponse listed;
  grpc::ClientContext context;
  ASSERT_TRUE(MakeStub(server.address())->SharedMemoryStatus(&context, {}, &listed).ok());
  EXPECT_EQ(listed.regions_size(), 0);
}

void V2Region(google::protobuf::Map<std::string, inference::InferParameter>* parameters,
              const std::string& region, int64_t offset, int64_t bytes) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_offset"].set_int64_param(offset);
  (*parameters)["shared_memory_byte_size"].set_int64_param(bytes);
}

// The KServe v2 front door's CUDA shared memory (what Triton's clients and perf_analyzer
// --shared-memory=cuda call): register, infer with input and output in the region, status,
// unregister of everything.
TEST(ServerCudaIpcTest, KServeV2CudaSharedMemory) {
  START_GPU_SERVER(server);
  Exporter exporter(4 * kMiB);
  ASSERT_EQ(exporter.handle().size(), 64u);
  Mapped mapped(exporter.handle());
  ASSERT_TRUE(mapped.ok());
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto v2 = inference::GRPCInferenceService::NewStub(channel);
  auto unary = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (v2.get()->*method)(&context, request, response);
  };
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(unary(&inference::GRPCInferenceService::Stub::ServerMetadata,
                    inference::ServerMetadataRequest(), &metadata)
                  .ok());
  EXPECT_NE(
      std::find(metadata.extensions().begin(), metadata.extensions().end(), "cuda_shared_memory"),
      metadata.extensions().end());
  inference::CudaSharedMemoryRegisterRequest reg;
  reg.set_name("v2");
  reg.set_raw_handle(exporter.handle());
  reg.set_device_id(0);
  reg.set_byte_size(4 * kMiB);
  inference::CudaSharedMemoryRegisterResponse registered;
  grpc::Status status =
      unary(&inference::GRPCInferenceService::Stub::CudaSharedMemoryRegister, reg, &registered);
  ASSERT_TRUE(status.ok()) << status.error_message();

  const Tensor x = RandomTensor(DType::kF16, {2, 300, 128}, 7, -1.0f, 1.0f);
  mapped.Write(0, x);
  inference::ModelInferRequest request;
  request.set_model_name("mean_pooling");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP16");
  for (int64_t d : x.shape()) input->add_shape(d);
  V2Region(input->mutable_parameters(), "v2", 0, static_cast<int64_t>(x.nbytes()));
  auto* output = request.add_outputs();
  output->set_name("out");
  V2Region(output->mutable_parameters(), "v2", 2 * kMiB, 2 * 128 * 2);
  inference::ModelInferResponse response;
  status = unary(&inference::GRPCInferenceService::Stub::ModelInfer, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), "");  // in the region
  EXPECT_EQ(response.parameters().at("device").int64_param(), 0);
  const Tensor out = mapped.Read(2 * kMiB, DType::kF16, {2, 128});
  v1::ExecuteRequest plain = MeanPoolingRequest(x);
  plain.set_platform(response.parameters().at("platform").string_param());
  plain.set_device(0);
  v1::ExecuteResponse inline_answer;
  ASSERT_TRUE(Call(*MakeStub(server.address()), plain, &inline_answer).ok());
  EXPECT_EQ(out.bytes(), WireOut(inline_answer, "out").bytes()) << "v2 in place == inline";

  inference::CudaSharedMemoryStatusResponse listed;
  ASSERT_TRUE(unary(&inference::GRPCInferenceService::Stub::CudaSharedMemoryStatus,
                    inference::CudaSharedMemoryStatusRequest(), &listed)
                  .ok());
  ASSERT_EQ(listed.regions_size(), 1);
  EXPECT_EQ(listed.regions().at("v2").byte_size(), 4 * kMiB);
  inference::SystemSharedMemoryStatusResponse system;
  ASSERT_TRUE(unary(&inference::GRPCInferenceService::Stub::SystemSharedMemoryStatus,
                    inference::SystemSharedMemoryStatusRequest(), &system)
                  .ok());
  EXPECT_EQ(system.regions_size(), 0) << "each kind lists its own";
  inference::CudaSharedMemoryUnregisterResponse gone;
  EXPECT_TRUE(unary(&inference::GRPCInferenceService::Stub::CudaSharedMemoryUnregister,
                    inference::CudaSharedMemoryUnregisterRequest(), &gone)
                  .ok());
  listed.Clear();
  ASSERT_TRUE(unary(&inference::GRPCInferenceService::Stub::CudaSharedMemoryStatus,
                    inference::CudaSharedMemoryStatusRequest(), &listed)
                  .ok());
  EXPECT_EQ(listed.regions_size(), 0);
}

TEST(ServerCudaIpcTest, BadHandlesAndDeadClientsLeaveAServingServer) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  Exporter exporter(4 * kMiB);
  ASSERT_EQ(exporter.handle().size(), 64u);
  std::string garbage(64, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 37 + 11);
  EXPECT_EQ(RegisterCuda(*stub, "g", garbage, 0, 1024).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterCuda(*stub, "g", "short", 0, 1024).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterCuda(*stub, "g", exporter.handle(), 0, 8 * kMiB).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "past the allocation";
  EXPECT_EQ(RegisterCuda(*stub, "g", exporter.handle(), 64, 1024).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "no such GPU";
  ASSERT_TRUE(RegisterCuda(*stub, "g", exporter.handle(), 0, 4 * kMiB).ok());
  EXPECT_EQ(RegisterCuda(*stub, "g", exporter.handle(), 0, 1024).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  // The client dies with its region registered: unregistering still works, calls go on.
  exporter.Kill(/*gently=*/false);
  EXPECT_EQ(Unregister(*stub, "g"), grpc::StatusCode::OK);
  v1::ExecuteRequest request =
      MeanPoolingRequest(RandomTensor(DType::kF16, {2, 64, 128}, 5, -1.0f, 1.0f));
  request.set_platform("cuda");
  v1::ExecuteResponse response;
  grpc::Status status = Call(*stub, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(server.running());
}

}  // namespace
}  // namespace kernelserve::testing
