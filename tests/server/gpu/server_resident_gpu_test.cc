// Resident tensors of kernelserve-server on a real GPU: created on the GPU (from data, from
// zeros), read by calls in place (the call runs on their GPU without naming it) and written by
// them, equal to the same calls with inline bytes bit for bit; an output written in place over
// the input it replaces; rows written and read back; a tensor past the GPU's room refused;
// the server healthy after. Fresh random inputs; output tensors poisoned (written with NaNs)
// before the calls that fill them. Skips where the server sees no GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

#define START_GPU_SERVER(server)                                              \
  ServerProcess server;                                                       \
  ASSERT_TRUE(server.Start({"--cache=memory", "--metrics-listen=off"}).ok()); \
  if (!absl::StrContains(server.startup_line(), "cuda:0")) {                  \
    GTEST_SKIP() << "no GPU: " << server.startup_line();                      \
  }

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return context;
}

v1::TensorRef Ref(const std::string& name) {
  v1::TensorRef ref;
  ref.set_tensor(name);
  return ref;
}

// Creates `name` on `device` (unset when < -1) from `wire`'s bytes; its response.
v1::CreateTensorResponse Create(v1::KernelService::Stub& stub, const std::string& name,
                                const v1::Tensor& wire, int device = -2) {
  v1::CreateTensorRequest create;
  create.set_name(name);
  create.set_dtype(wire.dtype());
  *create.mutable_shape() = wire.shape();
  *create.mutable_contents() = wire;
  if (device >= -1) create.set_device(device);
  v1::CreateTensorResponse response;
  grpc::Status status = stub.CreateTensor(Context().get(), create, &response);
  EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
  return response;
}

std::string ReadAll(v1::KernelService::Stub& stub, const std::string& name) {
  v1::ReadTensorRequest read;
  read.set_name(name);
  v1::ReadTensorResponse response;
  grpc::Status status = stub.ReadTensor(Context().get(), read, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.tensor().data();
}

v1::ExecuteRequest Attention(uint64_t seed, DType dtype) {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  request.set_platform("cuda");
  auto& inputs = *request.mutable_inputs();
  inputs["q"] = ToWire(RandomTensor(dtype, {2, 300, 8, 128}, seed, -1.0f, 1.0f));
  inputs["k"] = ToWire(RandomTensor(dtype, {2, 517, 2, 128}, seed + 1, -1.0f, 1.0f));
  inputs["v"] = ToWire(RandomTensor(dtype, {2, 517, 2, 128}, seed + 2, -1.0f, 1.0f));
  request.mutable_flash_attention()->set_causal(true);
  return request;
}

TEST(ServerResidentGpuTest, CallsReadAndWriteGpuTensorsInPlaceAsInlineCallsDo) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  const v1::ExecuteRequest inline_request = Attention(4100, DType::kBF16);
  v1::ExecuteResponse want;
  ASSERT_TRUE(stub->Execute(Context().get(), inline_request, &want).ok());

  // Placed on the GPU without asking.
  const v1::CreateTensorResponse k = Create(*stub, "k", inline_request.inputs().at("k"));
  EXPECT_EQ(k.tensor().device(), 0);
  EXPECT_GT(k.timing().h2d_us(), 0);
  Create(*stub, "v", inline_request.inputs().at("v"), 0);
  v1::Tensor poison = inline_request.inputs().at("q");
  std::memset(poison.mutable_data()->data(), 0xff, poison.data().size());
  Create(*stub, "out", poison, 0);

  v1::ExecuteRequest request = inline_request;
  request.clear_device();  // runs where its tensors are
  for (const char* name : {"k", "v"}) {
    (*request.mutable_inputs())[name].Clear();
    *(*request.mutable_inputs())[name].mutable_ref() = Ref(name);
  }
  (*request.mutable_output_regions())["out"] = Ref("out");
  v1::ExecuteResponse got;
  grpc::Status status = stub->Execute(Context().get(), request, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.device(), 0);
  EXPECT_EQ(got.platform(), "cuda");
  EXPECT_EQ(ReadAll(*stub, "out"), want.outputs().at("out").data());

  // In place over q: the kernel reads q as it was.
  Create(*stub, "q", inline_request.inputs().at("q"), 0);
  v1::ExecuteRequest over_q = request;
  (*over_q.mutable_inputs())["q"].Clear();
  *(*over_q.mutable_inputs())["q"].mutable_ref() = Ref("q");
  (*over_q.mutable_output_regions())["out"] = Ref("q");
  status = stub->Execute(Context().get(), over_q, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ReadAll(*stub, "q"), want.outputs().at("out").data());

  // Rows written on the GPU and read back.
  v1::WriteTensorRequest write;
  write.set_name("k");
  write.set_row_offset(1);
  v1::Tensor row = ToWire(RandomTensor(DType::kBF16, {1, 517, 2, 128}, 4200, -1.0f, 1.0f));
  *write.mutable_contents() = row;
  v1::WriteTensorResponse written;
  status = stub->WriteTensor(Context().get(), write, &written);
  ASSERT_TRUE(status.ok()) << status.error_message();
  v1::ReadTensorRequest read;
  read.set_name("k");
  read.set_row_offset(1);
  read.set_rows(1);
  v1::ReadTensorResponse rows;
  ASSERT_TRUE(stub->ReadTensor(Context().get(), read, &rows).ok());
  EXPECT_EQ(rows.tensor().data(), row.data());

  // A GPU tensor in a call on the CPU is refused, naming the GPU.
  v1::ExecuteRequest on_cpu = request;
  on_cpu.set_platform("cpu");
  on_cpu.clear_output_regions();
  status = stub->Execute(Context().get(), on_cpu, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "device 0")) << status.error_message();

  // More than the GPU's room: refused, nothing evicted.
  v1::CreateTensorRequest huge;
  huge.set_name("huge");
  huge.set_dtype(v1::DTYPE_F32);
  huge.add_shape(int64_t{1} << 37);  // 512 GiB
  huge.set_device(0);
  v1::CreateTensorResponse refused;
  status = stub->CreateTensor(Context().get(), huge, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::ListTensorsResponse listed;
  ASSERT_TRUE(stub->ListTensors(Context().get(), {}, &listed).ok());
  EXPECT_EQ(listed.tensors_size(), 4);
  // The next call reads k as written: the inline call with k's bytes now.
  v1::ExecuteRequest inline_now = inline_request;
  (*inline_now.mutable_inputs())["k"].set_data(ReadAll(*stub, "k"));
  ASSERT_TRUE(stub->Execute(Context().get(), inline_now, &want).ok());
  ASSERT_TRUE(stub->Execute(Context().get(), request, &got).ok());
  EXPECT_EQ(ReadAll(*stub, "out"), want.outputs().at("out").data());
}

TEST(ServerResidentGpuTest, TheOutputOfAMeanPoolingIntoAGpuTensorEqualsTheInlineOne) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  request.set_platform("cuda");
  (*request.mutable_inputs())["x"] = ToWire(RandomTensor(DType::kF32, {3, 333, 96}, 4300));
  v1::ExecuteResponse want;
  ASSERT_TRUE(stub->Execute(Context().get(), request, &want).ok());
  Create(*stub, "x", request.inputs().at("x"), 0);
  v1::CreateTensorRequest out;
  out.set_name("out");
  out.set_dtype(v1::DTYPE_F32);
  out.add_shape(3);
  out.add_shape(96);
  out.set_device(0);
  v1::CreateTensorResponse created;
  ASSERT_TRUE(stub->CreateTensor(Context().get(), out, &created).ok());
  EXPECT_EQ(ReadAll(*stub, "out"), std::string(3 * 96 * 4, '\0'));  // zeros
  v1::ExecuteRequest resident;
  resident.set_kernel("mean_pooling");
  resident.set_platform("cuda");
  *(*resident.mutable_inputs())["x"].mutable_ref() = Ref("x");
  (*resident.mutable_output_regions())["out"] = Ref("out");
  v1::ExecuteResponse got;
  grpc::Status status = stub->Execute(Context().get(), resident, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.device(), 0);
  EXPECT_EQ(ReadAll(*stub, "out"), want.outputs().at("out").data());
}

// The tensor of a wire tensor the test made.
Tensor FromWireOrDie(const v1::Tensor& wire) {
  absl::StatusOr<DType> dtype = FromProto(wire.dtype(), "wire");
  EXPECT_TRUE(dtype.ok());
  absl::StatusOr<Tensor> tensor =
      Tensor::FromBytes(*dtype, Shape(wire.shape().begin(), wire.shape().end()), wire.data());
  EXPECT_TRUE(tensor.ok());
  return *std::move(tensor);
}

// A paged decode step: q, new k and v, and caches of shuffled pages (sequence 1 empty).
v1::ExecuteRequest DecodeStep(uint64_t seed) {
  constexpr int64_t kPages = 40, kPageSize = 16, kMaxPages = 8;
  v1::ExecuteRequest request;
  request.set_kernel("paged_attention");
  request.set_platform("cuda");
  auto& inputs = *request.mutable_inputs();
  inputs["q"] = ToWire(RandomTensor(DType::kBF16, {3, 2, 8, 128}, seed, -1.0f, 1.0f));
  inputs["k"] = ToWire(RandomTensor(DType::kBF16, {3, 2, 2, 128}, seed + 1, -1.0f, 1.0f));
  inputs["v"] = ToWire(RandomTensor(DType::kBF16, {3, 2, 2, 128}, seed + 2, -1.0f, 1.0f));
  for (const char* cache : {"k_cache", "v_cache"}) {
    inputs[cache] = ToWire(RandomTensor(DType::kBF16, {kPages, kPageSize, 2, 128}, seed + 3));
    seed += 7;
  }
  std::vector<int64_t> table(3 * kMaxPages);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>((i * 17 + 5) % 40);
  inputs["block_table"] = ToWire(Tensor::FromInts(DType::kI32, {3, kMaxPages}, table));
  inputs["cache_seqlens"] = ToWire(Tensor::FromInts(DType::kI32, {3}, {100, 0, 37}));
  (*request.mutable_parameters())["causal"].set_bool_value(true);
  return request;
}

// `cache`'s bytes with the step's new rows (`rows`, [3, 2, 2, 128] bf16) at positions L - 2 and
// L - 1 of each non-empty sequence.
std::string Appended(const v1::ExecuteRequest& step, const char* cache, const char* rows) {
  std::string bytes = step.inputs().at(cache).data();
  const Tensor table = FromWireOrDie(step.inputs().at("block_table"));
  const Tensor lens = FromWireOrDie(step.inputs().at("cache_seqlens"));
  const size_t row = 2 * 128 * 2;  // Hkv x D x bf16
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t len = lens.GetInt(b);
    for (int64_t i = 0; len > 0 && i < 2; ++i) {
      const int64_t t = len - 2 + i;
      const int64_t page = table.GetInt(b * 8 + t / 16);
      std::memcpy(bytes.data() + (page * 16 + t % 16) * row,
                  step.inputs().at(rows).data().data() + (b * 2 + i) * row, row);
    }
  }
  return bytes;
}

TEST(ServerResidentGpuTest, ADecodeStepAppendsIntoGpuCachesInPlaceAndAttendsAsInline) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  const v1::ExecuteRequest step = DecodeStep(4400);
  v1::ExecuteResponse want;
  grpc::Status status = stub->Execute(Context().get(), step, &want);
  ASSERT_TRUE(status.ok()) << status.error_message();
  // The float64 reference (the cpu platform) within bf16's rounding.
  v1::ExecuteRequest on_cpu = step;
  on_cpu.set_platform("cpu");
  v1::ExecuteResponse reference;
  ASSERT_TRUE(stub->Execute(Context().get(), on_cpu, &reference).ok());
  const Tensor got_out = FromWireOrDie(want.outputs().at("out"));
  const Tensor ref_out = FromWireOrDie(reference.outputs().at("out"));
  for (int64_t i = 0; i < got_out.numel(); ++i) {
    ASSERT_NEAR(got_out.GetFloat(i), ref_out.GetFloat(i), 2e-2) << "element " << i;
  }

  Create(*stub, "k-pages", step.inputs().at("k_cache"), 0);
  Create(*stub, "v-pages", step.inputs().at("v_cache"), 0);
  v1::ExecuteRequest resident = step;
  resident.clear_platform();  // runs where its caches are
  (*resident.mutable_inputs())["k_cache"].Clear();
  *(*resident.mutable_inputs())["k_cache"].mutable_ref() = Ref("k-pages");
  (*resident.mutable_inputs())["v_cache"].Clear();
  *(*resident.mutable_inputs())["v_cache"].mutable_ref() = Ref("v-pages");
  v1::ExecuteResponse got;
  status = stub->Execute(Context().get(), resident, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.device(), 0);
  EXPECT_EQ(got.outputs().at("out").data(), want.outputs().at("out").data());
  // The new rows are in the resident caches, and nothing else changed.
  EXPECT_EQ(ReadAll(*stub, "k-pages"), Appended(step, "k_cache", "k"));
  EXPECT_EQ(ReadAll(*stub, "v-pages"), Appended(step, "v_cache", "v"));

  // A cache in host memory cannot be updated by a call on the GPU: refused, naming why.
  Create(*stub, "k-host", step.inputs().at("k_cache"), -1);
  v1::ExecuteRequest host = resident;
  host.set_platform("cuda");
  *(*host.mutable_inputs())["k_cache"].mutable_ref() = Ref("k-host");
  status = stub->Execute(Context().get(), host, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "updated in place"))
      << status.error_message();
}

// fp8 caches with per-head scales: a decode step on resident GPU caches against the same step
// on resident host caches run by the cpu platform (the float64 reference): out within bf16's
// rounding, and the appended caches the same bytes (the GPU quantizes as the reference does).
TEST(ServerResidentGpuTest, AnFp8DecodeStepMatchesTheCpuPlatformAndAppendsTheSameBytes) {
  START_GPU_SERVER(server);
  auto stub = MakeStub(server.address());
  v1::ExecuteRequest step = DecodeStep(5500);
  auto& inputs = *step.mutable_inputs();
  uint64_t seed = 5600;
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(fp8));
    for (const char* cache : {"k_cache", "v_cache"}) {
      inputs[cache] = ToWire(RandomTensor(fp8, {40, 16, 2, 128}, seed++, -2.0f, 2.0f));
    }
    inputs["k_scale"] = ToWire(RandomTensor(DType::kF32, {2}, seed++, 0.05f, 0.5f));
    inputs["v_scale"] = ToWire(RandomTensor(DType::kF32, {2}, seed++, 0.05f, 0.5f));
    const std::string tag = std::string(DTypeName(fp8));
    v1::ExecuteRequest on_gpu = step, on_cpu = step;
    on_gpu.clear_platform();  // runs where its caches are
    on_cpu.set_platform("cpu");
    for (const char* cache : {"k_cache", "v_cache"}) {
      Create(*stub, tag + "-gpu-" + cache, inputs.at(cache), 0);
      Create(*stub, tag + "-host-" + cache, inputs.at(cache), -1);
      (*on_gpu.mutable_inputs())[cache].Clear();
      *(*on_gpu.mutable_inputs())[cache].mutable_ref() = Ref(tag + "-gpu-" + cache);
      (*on_cpu.mutable_inputs())[cache].Clear();
      *(*on_cpu.mutable_inputs())[cache].mutable_ref() = Ref(tag + "-host-" + cache);
    }
    v1::ExecuteResponse got, reference;
    grpc::Status status = stub->Execute(Context().get(), on_gpu, &got);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(got.device(), 0);
    status = stub->Execute(Context().get(), on_cpu, &reference);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const Tensor got_out = FromWireOrDie(got.outputs().at("out"));
    const Tensor ref_out = FromWireOrDie(reference.outputs().at("out"));
    double largest = 0.0;
    for (int64_t i = 0; i < got_out.numel(); ++i) {
      ASSERT_NEAR(got_out.GetFloat(i), ref_out.GetFloat(i), 2e-2) << "element " << i;
      largest = std::max(largest, std::fabs(static_cast<double>(ref_out.GetFloat(i))));
    }
    EXPECT_GT(largest, 0.05) << "outputs too small to tell anything";
    for (const char* cache : {"k_cache", "v_cache"}) {
      EXPECT_EQ(ReadAll(*stub, tag + "-gpu-" + cache), ReadAll(*stub, tag + "-host-" + cache))
          << cache << " after the append";
      EXPECT_NE(ReadAll(*stub, tag + "-gpu-" + cache), inputs.at(cache).data())
          << cache << ": the append wrote nothing";
    }
  }
}

}  // namespace
}  // namespace kernelserve::testing
