// The kernelserve-server binary's tuning under a time budget: Autotune's time_budget_ms (cut
// short, zero, too large, negative), the store rule for a result cut short, and AutotuneStream's
// progress messages.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

using ::grpc::StatusCode;
using ::testing::HasSubstr;

// A shapes-only mean_pooling tuning on the cpu, each candidate taking milliseconds.
v1::AutotuneRequest TuneRequest(std::vector<int64_t> shape = {8, 2048, 256}) {
  v1::AutotuneRequest request;
  request.set_kernel("mean_pooling");
  request.set_platform("cpu");
  v1::Tensor& x = (*request.mutable_inputs())["x"];
  x.set_dtype(v1::DTYPE_F32);
  for (int64_t d : shape) x.add_shape(d);
  return request;
}

// One file-store server shared by the tests of this fixture (its default budget, 30 s).
class AutotuneBudgetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("autotune-budget"));
    server_ = new ServerProcess();
    absl::Status started = server_->Start({"--cache=file:" + *dir_ + "/configs.json"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    absl::StatusOr<int> code = server_->Stop();
    EXPECT_TRUE(code.ok() && *code == 0) << code.status();
    delete server_;
    delete dir_;
  }
  void SetUp() override { stub_ = MakeStub(server_->address()); }

  grpc::Status Tune(const v1::AutotuneRequest& request, v1::AutotuneResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Autotune(&context, request, response);
  }

  // The tiers ("memory", "file") holding a config for `cache_key`.
  std::vector<std::string> TiersOf(const std::string& cache_key) {
    v1::ListConfigsRequest request;
    v1::ListConfigsResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->ListConfigs(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> tiers;
    for (const v1::ConfigEntry& entry : response.entries()) {
      if (entry.cache_key() == cache_key) tiers.push_back(entry.tier());
    }
    return tiers;
  }

  static std::string* dir_;
  static ServerProcess* server_;
  std::unique_ptr<v1::KernelService::Stub> stub_;
};
std::string* AutotuneBudgetTest::dir_ = nullptr;
ServerProcess* AutotuneBudgetTest::server_ = nullptr;

TEST_F(AutotuneBudgetTest, ZeroBudgetIsTheServersAndTimesEveryCandidate) {
  v1::AutotuneRequest request = TuneRequest({2, 64, 48});
  request.set_time_budget_ms(0);
  v1::AutotuneResponse tuned;
  grpc::Status status = Tune(request, &tuned);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tuned.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_GT(tuned.candidates_total(), 1);
  EXPECT_EQ(tuned.candidates_total(), tuned.candidates_size());
  EXPECT_EQ(tuned.candidates_timed(), tuned.candidates_total());
  EXPECT_FALSE(tuned.budget_reached());
  EXPECT_EQ(tuned.time_budget_ms(), 30000);  // --autotune-budget's default
  // A full tuning is stored.
  EXPECT_THAT(TiersOf(tuned.cache_key()), ::testing::Contains("file"));
}

// A budget of about one candidate's time times a few of them, answers OK with the best of those,
// says so, and keeps it out of the store.
TEST_F(AutotuneBudgetTest, BudgetCutsTheTuningShortAndTheResultIsNotStored) {
  v1::AutotuneResponse full;
  grpc::Status status = Tune(TuneRequest(), &full);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(full.candidates_total(), 3) << "needs a kernel with several candidates";
  const std::string key = full.cache_key();
  v1::DeleteConfigRequest forget;
  forget.set_cache_key(key);
  v1::DeleteConfigResponse forgotten;
  grpc::ClientContext delete_context;
  status = stub_->DeleteConfig(&delete_context, forget, &forgotten);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(TiersOf(key).empty());

  // One and a half candidates' time: the first starts (the reference run is one launch of the
  // six a candidate takes), the third does not.
  const double per_candidate_ms = full.elapsed_seconds() * 1e3 / full.candidates_total();
  v1::AutotuneRequest request = TuneRequest();
  request.set_time_budget_ms(std::max<int64_t>(1, static_cast<int64_t>(1.5 * per_candidate_ms)));
  v1::AutotuneResponse cut;
  status = Tune(request, &cut);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(cut.budget_reached());
  EXPECT_EQ(cut.time_budget_ms(), request.time_budget_ms());
  EXPECT_EQ(cut.candidates_total(), full.candidates_total());
  EXPECT_GE(cut.candidates_timed(), 1);
  EXPECT_LT(cut.candidates_timed(), cut.candidates_total());
  EXPECT_EQ(cut.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_GT(cut.best_us(), 0.0);
  int skipped = 0;
  for (const v1::CandidateResult& c : cut.candidates()) {
    if (c.status().code() == static_cast<int>(StatusCode::DEADLINE_EXCEEDED)) ++skipped;
  }
  EXPECT_EQ(skipped, cut.candidates_total() - cut.candidates_timed());
  EXPECT_THAT(cut.warnings(), ::testing::Contains(HasSubstr("not written to the config store")));
  // In memory for the calls that follow, never in the store.
  EXPECT_EQ(TiersOf(key), std::vector<std::string>{"memory"});
}

TEST_F(AutotuneBudgetTest, BudgetSpentBeforeAnyCandidateIsDeadlineExceededNamingIt) {
  // The heuristic config's reference run alone takes longer than 1 ms.
  v1::AutotuneRequest request = TuneRequest({16, 4096, 256});
  request.set_time_budget_ms(1);
  v1::AutotuneResponse response;
  grpc::Status status = Tune(request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("time budget of 1ms"));
  EXPECT_THAT(status.error_message(), HasSubstr("before any of the"));
}

TEST_F(AutotuneBudgetTest, NegativeBudgetIsInvalidArgumentNamingTheField) {
  v1::AutotuneRequest request = TuneRequest({2, 64, 48});
  request.set_time_budget_ms(-5);
  v1::AutotuneResponse response;
  grpc::Status status = Tune(request, &response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("time_budget_ms=-5"));

  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::AutotuneProgress>> stream =
      stub_->AutotuneStream(&context, request);
  v1::AutotuneProgress progress;
  EXPECT_FALSE(stream->Read(&progress));
  status = stream->Finish();
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("time_budget_ms=-5"));
}

TEST_F(AutotuneBudgetTest, StreamSaysHowFarItIsAndItsLastMessageCarriesTheResult) {
  v1::AutotuneRequest request = TuneRequest({4, 512, 128});
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  std::unique_ptr<grpc::ClientReader<v1::AutotuneProgress>> stream =
      stub_->AutotuneStream(&context, request);
  std::vector<v1::AutotuneProgress> messages;
  for (v1::AutotuneProgress progress; stream->Read(&progress);) messages.push_back(progress);
  grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(messages.size(), 2u);  // at least the first progress and the result
  const v1::AutotuneProgress& last = messages.back();
  ASSERT_TRUE(last.has_result());
  const v1::AutotuneResponse& result = last.result();
  EXPECT_EQ(result.config_source(), v1::CONFIG_SOURCE_AUTOTUNE);
  EXPECT_EQ(result.candidates_timed(), result.candidates_total());
  EXPECT_FALSE(result.budget_reached());
  EXPECT_EQ(last.candidates_done(), result.candidates_total());
  EXPECT_EQ(last.candidates_total(), result.candidates_total());
  EXPECT_DOUBLE_EQ(last.best_us(), result.best_us());
  int done = 0;
  double elapsed = 0;
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    const v1::AutotuneProgress& m = messages[i];
    EXPECT_FALSE(m.has_result()) << i;
    EXPECT_EQ(m.candidates_total(), result.candidates_total()) << i;
    EXPECT_GE(m.candidates_done(), done) << i;
    EXPECT_LE(m.candidates_done(), m.candidates_total()) << i;
    EXPECT_GE(m.elapsed_seconds(), elapsed) << i;
    if (m.candidates_done() > 0) {
      EXPECT_GT(m.best_us(), 0.0) << i;
    }
    done = m.candidates_done();
    elapsed = m.elapsed_seconds();
  }
  EXPECT_EQ(messages.front().candidates_done(), 0);  // once the reference run is done
  EXPECT_GE(last.candidates_done(), done);
}

TEST_F(AutotuneBudgetTest, StreamCutByTheBudgetSaysSo) {
  v1::AutotuneRequest request = TuneRequest({16, 4096, 256});
  request.set_time_budget_ms(1);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::AutotuneProgress>> stream =
      stub_->AutotuneStream(&context, request);
  for (v1::AutotuneProgress progress; stream->Read(&progress);) {
    EXPECT_FALSE(progress.has_result());
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("time budget of 1ms"));
}

// --autotune-budget caps what a call asks for.
TEST(AutotuneBudgetFlagTest, ServerBudgetCapsTheCallsAndWarns) {
  ServerProcess server;
  absl::Status started = server.Start({"--cache=memory", "--autotune-budget=60s"});
  ASSERT_TRUE(started.ok()) << started;
  std::unique_ptr<v1::KernelService::Stub> stub = MakeStub(server.address());
  v1::AutotuneRequest request = TuneRequest({2, 64, 48});
  request.set_time_budget_ms(3600 * 1000);
  v1::AutotuneResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Autotune(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.time_budget_ms(), 60000);
  EXPECT_FALSE(response.budget_reached());
  EXPECT_THAT(response.warnings(), ::testing::Contains(HasSubstr("--autotune-budget")));
  v1::ServerInfo info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(stub->GetServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.autotune_budget_ms(), 60000);
  absl::StatusOr<int> code = server.Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << code.status();

  ServerProcess refused;
  absl::Status bad = refused.Start({"--cache=memory", "--autotune-budget=-1s"});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace kernelserve::testing
