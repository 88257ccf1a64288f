// CallTracker and InflightBudget: the in-flight accounting of one call, and the refusal of new
// calls once the server drains.
#include "server/call_tracker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "server/budget.h"
#include "server/metrics.h"

namespace kernelserve::server {
namespace {

using ::testing::HasSubstr;

TEST(CallTrackerTest, HoldCountsTheRequestOnceAndReleaseGivesEverythingBack) {
  InflightBudget budget(1000);
  Metrics metrics;
  {
    CallTracker tracker(&budget, &metrics, /*context=*/nullptr);
    ASSERT_TRUE(tracker.Hold(100, "request").ok());
    ASSERT_TRUE(tracker.Hold(200, "outputs").ok());
    EXPECT_EQ(budget.requests(), 1);
    EXPECT_EQ(budget.bytes(), 300);
  }
  EXPECT_EQ(budget.requests(), 0);
  EXPECT_EQ(budget.bytes(), 0);
}

TEST(CallTrackerTest, OverTheCapIsResourceExhaustedNamingTheFlag) {
  InflightBudget budget(1000);
  Metrics metrics;
  CallTracker tracker(&budget, &metrics, nullptr);
  const absl::Status status = tracker.Hold(1001, "request");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max-inflight-bytes=1000"));
  EXPECT_EQ(budget.requests(), 0);
}

TEST(CallTrackerTest, AClosedBudgetRefusesNewCallsAndLetsHeldOnesGoOn) {
  InflightBudget budget(1000);
  Metrics metrics;
  CallTracker held(&budget, &metrics, nullptr);
  ASSERT_TRUE(held.Hold(100, "request").ok());
  budget.Close();
  CallTracker late(&budget, &metrics, nullptr);
  const absl::Status refused = late.Hold(100, "request");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("shutting down"));
  EXPECT_TRUE(held.Hold(200, "outputs").ok());  // a held call still takes its outputs
  EXPECT_EQ(budget.requests(), 1);
  EXPECT_EQ(budget.bytes(), 300);
}

// A stream's answer waiting to be written keeps its bytes in the budget, even past the cap, but
// no longer counts as a request; the next calls see the budget that much fuller until the
// answer's hold is gone.
TEST(CallTrackerTest, KeepForAnswerLeavesTheAnswersBytesInTheBudgetUntilTheHoldGoes) {
  InflightBudget budget(1000);
  Metrics metrics;
  {
    AnswerHold answer;
    {
      CallTracker tracker(&budget, &metrics, nullptr);
      ASSERT_TRUE(tracker.Hold(100, "request").ok());
      ASSERT_TRUE(tracker.Hold(800, "outputs").ok());
      EXPECT_EQ(tracker.held_bytes(), 900);
      CallTracker other(&budget, &metrics, nullptr);
      ASSERT_TRUE(other.Hold(100, "request").ok());
      answer = tracker.KeepForAnswer(950);  // the answer came out larger than the outputs
      EXPECT_EQ(answer.bytes(), 950);
      EXPECT_EQ(tracker.held_bytes(), 0);
      EXPECT_EQ(budget.requests(), 1);
      EXPECT_EQ(budget.bytes(), 1050);
      EXPECT_EQ(other.Hold(1, "outputs").code(), absl::StatusCode::kResourceExhausted);
    }
    EXPECT_EQ(budget.requests(), 0);
    EXPECT_EQ(budget.bytes(), 950);  // until the answer is written
    AnswerHold moved = std::move(answer);
    EXPECT_EQ(budget.bytes(), 950);
  }
  EXPECT_EQ(budget.bytes(), 0);
}

// The answer counts in its identity's quota too while that has room.
TEST(CallTrackerTest, KeepForAnswerCountsInTheIdentitysQuotaWhenItHasRoom) {
  InflightBudget budget(10000);
  Metrics metrics;
  QuotaOptions quota;
  quota.inflight_bytes = 1000;
  auto tenant = std::make_shared<Tenant>("alice", "alice", quota);
  {
    CallTracker tracker(&budget, &metrics, nullptr);
    tracker.set_caller(Caller(), tenant);
    ASSERT_TRUE(tracker.Hold(500, "request").ok());
    AnswerHold answer = tracker.KeepForAnswer(400);
    EXPECT_EQ(tenant->held(), 400);
    AnswerHold over = tracker.KeepForAnswer(700);  // no room: the budget alone counts it
    EXPECT_EQ(tenant->held(), 400);
    EXPECT_EQ(budget.bytes(), 1100);
  }
  EXPECT_EQ(tenant->held(), 0);
  EXPECT_EQ(budget.bytes(), 0);
}

}  // namespace
}  // namespace kernelserve::server
