// The call pipeline's steps without a server (server/pipeline.h): RegionRefsOf, TakeInputs
// (inline tensors and the caller's regions, and its refusals with their codes), Reserve (the
// answer's size before the outputs' hold), CheckOutputsProduced and AdmitItem.
#include "server/pipeline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "server/budget.h"
#include "server/call_tracker.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/shared_memory.h"
#include "server/tenants.h"
#include "server/worker_pool.h"
#include "tests/support/fake_kernel.h"

namespace kernelserve::server {
namespace {

using ::kernelserve::testing::FakeCounters;
using ::kernelserve::testing::FakeKernel;
using ::testing::HasSubstr;

// An identity calling from this host (a process of this test's user), which may register the
// objects the test creates.
Caller Identity(std::string name) {
  Caller caller;
  caller.identity = std::move(name);
  caller.role = Role::kCaller;
  caller.peer.uid = geteuid();
  return caller;
}

// A shm_open object of `bytes` bytes holding the floats 1, 2, 3, ..., removed at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes)
      : key_(absl::StrCat("/kernelserve-pipeline-test-", getpid(), "-", counter_++)) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    for (size_t i = 0; i < bytes / sizeof(float); ++i) {
      static_cast<float*>(map)[i] = static_cast<float>(i + 1);
    }
    munmap(map, bytes);
    close(fd);
  }
  ~ShmObject() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }

 private:
  static inline int counter_ = 0;
  std::string key_;
};

void SetRef(v1::TensorRef* ref, const std::string& region, uint64_t byte_size) {
  ref->set_region(region);
  ref->set_offset(0);
  ref->set_byte_size(byte_size);
}

// The fake kernel (out = 2 * x, f32 [N]) planned on the CPU, with a registry of system regions.
class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.Register(std::make_unique<FakeKernel>(counters_)).ok());
  }

  CallPlan Plan(int64_t n = 4) {
    CallParams params;
    params.kernel = "fake_scale";
    params.specs = {{"x", TensorSpec{DType::kF32, {n}}}};
    absl::StatusOr<CallPlan> plan = PlanCall(executor_, pool_, params);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *std::move(plan);
  }

  // A request of x = [1, 2, 3, 4] sent inline.
  static v1::ExecuteRequest InlineRequest() {
    v1::ExecuteRequest request;
    request.set_kernel("fake_scale");
    PutTensor(Tensor::FromFloats(DType::kF32, {4}, {1, 2, 3, 4}),
              &(*request.mutable_inputs())["x"]);
    return request;
  }

  // A request whose x (f32 [4]) lies in region `region`.
  static v1::ExecuteRequest RegionRequest(const std::string& region) {
    v1::ExecuteRequest request;
    request.set_kernel("fake_scale");
    v1::Tensor& x = (*request.mutable_inputs())["x"];
    x.set_dtype(ToProto(DType::kF32));
    x.add_shape(4);
    SetRef(x.mutable_ref(), region, 16);
    return request;
  }

  std::shared_ptr<FakeCounters> counters_ = std::make_shared<FakeCounters>();
  KernelRegistry registry_;
  ConfigCache memory_;
  ConfigSelectorChain chain_{&memory_, nullptr};
  Executor executor_{&registry_, &chain_, /*gpus=*/{}};
  WorkerPool pool_{/*devices=*/{-1}};  // the CPU's worker
  SharedMemoryRegistry regions_{SharedMemoryOptions{}};
  const Caller alice_ = Identity("alice");
  const Caller bob_ = Identity("bob");
};

TEST_F(PipelineTest, RegionRefsOfANativeRequestAreItsRefInputsAndOutputRegions) {
  v1::ExecuteRequest request = RegionRequest("in");
  PutTensor(Tensor::FromFloats(DType::kF32, {1}, {1}), &(*request.mutable_inputs())["y"]);
  SetRef(&(*request.mutable_output_regions())["out"], "out-region", 64);
  const CallRegionRefs refs = RegionRefsOf(request);
  ASSERT_EQ(refs.inputs.size(), 1u);
  EXPECT_EQ(refs.inputs.at("x").region, "in");
  EXPECT_EQ(refs.inputs.at("x").byte_size, 16u);
  ASSERT_EQ(refs.outputs.size(), 1u);
  EXPECT_EQ(refs.outputs.at("out").region, "out-region");
  EXPECT_EQ(refs.outputs.at("out").byte_size, 64u);
}

TEST_F(PipelineTest, TakeInputsMovesInlineTensorsOutAndHoldsNoRegions) {
  v1::ExecuteRequest request = InlineRequest();
  absl::StatusOr<PreparedCall> call =
      TakeInputs(&regions_, alice_, Plan(), RegionRefsOf(request), &request, nullptr);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_TRUE(call->inputs.contains("x"));
  EXPECT_EQ(call->inputs.at("x").nbytes(), 16u);
  EXPECT_TRUE(call->output_spans.empty());
  EXPECT_EQ(call->regions, nullptr);
  EXPECT_TRUE(request.inputs().at("x").data().empty());  // moved out
}

TEST_F(PipelineTest, TakeInputsReadsTheCallersOwnRegionAndHoldsIt) {
  ShmObject object(4096);
  ASSERT_TRUE(regions_.RegisterSystem(alice_, "in", object.key(), 0, 4096).ok());
  v1::ExecuteRequest request = RegionRequest("in");
  SetRef(&(*request.mutable_output_regions())["out"], "in", 16);
  absl::StatusOr<PreparedCall> call =
      TakeInputs(&regions_, alice_, Plan(), RegionRefsOf(request), &request, nullptr);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_TRUE(call->inputs.contains("x"));
  float x[4] = {};
  std::memcpy(x, call->inputs.at("x").data(), sizeof(x));
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_TRUE(call->output_spans.contains("out"));
  ASSERT_NE(call->regions, nullptr);
  EXPECT_FALSE(call->regions->empty());
  EXPECT_FALSE(request.inputs().contains("x"));  // taken out of the request
}

// Whichever front door names it, a region of another identity is not the caller's: NotFound,
// as for a region nobody registered, so a caller cannot learn other identities' names.
TEST_F(PipelineTest, TakeInputsRefusesARegionOfAnotherCallerAsNotFound) {
  ShmObject object(4096);
  ASSERT_TRUE(regions_.RegisterSystem(alice_, "mine", object.key(), 0, 4096).ok());
  v1::ExecuteRequest request = RegionRequest("mine");
  const absl::StatusOr<PreparedCall> input =
      TakeInputs(&regions_, bob_, Plan(), RegionRefsOf(request), &request, nullptr);
  EXPECT_EQ(input.status().code(), absl::StatusCode::kNotFound) << input.status();
  EXPECT_THAT(input.status().message(), HasSubstr("input 'x'"));
  EXPECT_TRUE(request.inputs().contains("x"));  // nothing taken

  v1::ExecuteRequest outputs = InlineRequest();
  CallRegionRefs refs;  // as the v2 front door gives them
  refs.outputs["out"] = {"mine", 0, 16};
  const absl::StatusOr<PreparedCall> output =
      TakeInputs(&regions_, bob_, Plan(), refs, &outputs, nullptr);
  EXPECT_EQ(output.status().code(), absl::StatusCode::kNotFound) << output.status();
  EXPECT_THAT(output.status().message(), HasSubstr("output 'out'"));
}

TEST_F(PipelineTest, TakeInputsRefusesAnInputWithDataAndARef) {
  v1::ExecuteRequest request = InlineRequest();
  SetRef((*request.mutable_inputs())["x"].mutable_ref(), "in", 16);
  const absl::StatusOr<PreparedCall> call =
      TakeInputs(&regions_, alice_, Plan(), RegionRefsOf(request), &request, nullptr);
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(call.status().message(), HasSubstr("input 'x': data and ref both set"));
}

TEST_F(PipelineTest, TakeInputsWithoutARegistryIsUnimplementedForARegion) {
  v1::ExecuteRequest request = RegionRequest("in");
  const absl::StatusOr<PreparedCall> call =
      TakeInputs(/*registry=*/nullptr, alice_, Plan(), RegionRefsOf(request), &request, nullptr);
  EXPECT_EQ(call.status().code(), absl::StatusCode::kUnimplemented);
  // Inline tensors need none.
  v1::ExecuteRequest inline_request = InlineRequest();
  EXPECT_TRUE(TakeInputs(nullptr, alice_, Plan(), {}, &inline_request, nullptr).ok());
}

TEST_F(PipelineTest, TakeInputsRefusesARegionRangeThatIsNotTheInputsSize) {
  ShmObject object(4096);
  ASSERT_TRUE(regions_.RegisterSystem(alice_, "in", object.key(), 0, 4096).ok());
  v1::ExecuteRequest request = RegionRequest("in");
  (*request.mutable_inputs())["x"].mutable_ref()->set_byte_size(12);
  const absl::StatusOr<PreparedCall> call =
      TakeInputs(&regions_, alice_, Plan(), RegionRefsOf(request), &request, nullptr);
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(call.status().message(), HasSubstr("input 'x'"));
}

// The answer is checked before the outputs are held: a refusal holds nothing.
TEST_F(PipelineTest, ReserveRefusesAnAnswerPastMaxMessageBytesBeforeHolding) {
  ServerOptions options;
  options.max_message_bytes = 1024;
  InflightBudget budget(1 << 20);
  Metrics metrics;
  CallTracker tracker(&budget, &metrics, /*context=*/nullptr);
  PreparedCall call;
  call.plan = Plan(/*n=*/1000);  // 4000 bytes of out
  const absl::Status refused = Reserve(options, call, {}, tracker);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("--max-message-bytes=1024"));
  EXPECT_THAT(refused.message(), HasSubstr("the answer: 4000 bytes of outputs"));
  EXPECT_EQ(tracker.held_bytes(), 0);

  options.max_message_bytes = 1 << 20;
  ASSERT_TRUE(Reserve(options, call, {}, tracker).ok());
  EXPECT_EQ(tracker.held_bytes(), 4000);
  EXPECT_EQ(budget.bytes(), 4000);
}

TEST_F(PipelineTest, ReserveRefusesOutputsPastTheInflightBudget) {
  ServerOptions options;
  InflightBudget budget(1000);
  Metrics metrics;
  CallTracker tracker(&budget, &metrics, nullptr);
  PreparedCall call;
  call.plan = Plan(/*n=*/1000);
  const absl::Status refused = Reserve(options, call, {}, tracker);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("--max-inflight-bytes=1000"));
}

TEST_F(PipelineTest, CheckOutputsProducedNamesAnOutputTheCallDoesNotProduce) {
  const CallPlan plan = Plan();
  EXPECT_TRUE(CheckOutputsProduced(plan, {}).ok());
  EXPECT_TRUE(CheckOutputsProduced(plan, {"out"}).ok());
  const absl::Status missing = CheckOutputsProduced(plan, {"out", "extra"});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("output 'extra' is not produced by this call"));
}

TEST_F(PipelineTest, MayRunInlineForSmallInputsOnly) {
  PreparedCall call;
  call.inputs["x"] = Tensor::FromFloats(DType::kF32, {4}, {1, 2, 3, 4});
  EXPECT_TRUE(MayRunInline(call));
  call.inputs["x"] = Tensor::FromFloats(DType::kF32, {20000}, std::vector<float>(20000, 1.0f));
  EXPECT_FALSE(MayRunInline(call));
}

// A stream's later item takes its identity's rate like a call of its own.
TEST(PipelineAdmitTest, AdmitItemTakesTheIdentitysRate) {
  QuotaOptions quota;
  quota.requests_per_second = 0.001;  // no refill within the test
  quota.request_burst = 1;
  Tenants tenants(quota, {"alice"});
  Metrics metrics;
  std::shared_ptr<Tenant> alice = tenants.Of("alice");
  EXPECT_TRUE(AdmitItem(*alice, metrics).ok());
  const absl::Status refused = AdmitItem(*alice, metrics);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("--quota-requests-per-second"));
}

}  // namespace
}  // namespace kernelserve::server
