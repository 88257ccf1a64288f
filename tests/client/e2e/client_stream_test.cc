// Client::ExecuteStream against a real kernelserve-server process.
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/client/e2e/client_fixture.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

class ClientStreamTest : public ClientServerTest {};

v1::ExecuteRequest MeanPoolingRequest(const Tensor& x, const std::string& request_id) {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  PutTensor(x, &(*request.mutable_inputs())["x"]);
  request.set_request_id(request_id);
  return request;
}

void ExpectMeans(const absl::StatusOr<RunResult>& r, const Tensor& x) {
  ASSERT_TRUE(r.ok()) << r.status();
  AllCloseResult close = AllClose(r->outputs.at("out").ToDoubles(), MeanOverRows(x), 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;
}

// Answers come back in request order, each with its own id; the bad item in the middle answers
// with its error and the items after it still run.
TEST_F(ClientStreamTest, AnswersInOrderWithABadItemInTheMiddle) {
  std::vector<Tensor> xs;
  std::vector<v1::ExecuteRequest> requests;
  for (int i = 0; i < 7; ++i) {
    // Different shapes per item, so a mix-up of answers shows in the outputs.
    xs.push_back(RandomTensor(DType::kF32, {1 + i % 3, 5 + i, 8}, 100 + static_cast<uint64_t>(i)));
    requests.push_back(MeanPoolingRequest(xs.back(), "item-" + std::to_string(i)));
  }
  requests[3] = MeanPoolingRequest(RandomTensor(DType::kF32, {4, 8}, 99), "item-3");  // rank 2
  absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> answers = client_->ExecuteStream(requests);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const absl::StatusOr<RunResult>& r = (*answers)[static_cast<size_t>(i)];
    if (i == 3) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
      EXPECT_NE(r.status().message().find("'x'"), std::string::npos) << r.status();
      continue;
    }
    SCOPED_TRACE(i);
    ExpectMeans(r, xs[static_cast<size_t>(i)]);
    if (r.ok()) {
      EXPECT_EQ(r->request_id, "item-" + std::to_string(i));
    }
  }
}

// Empty and repeated ids still match their requests.
TEST_F(ClientStreamTest, RepeatedAndEmptyIdsMatch) {
  std::vector<Tensor> xs;
  std::vector<v1::ExecuteRequest> requests;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(RandomTensor(DType::kF32, {2, 3 + 2 * i, 4}, 200 + static_cast<uint64_t>(i)));
    requests.push_back(MeanPoolingRequest(xs.back(), i % 2 ? "same" : ""));
  }
  absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> answers = client_->ExecuteStream(requests);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    ExpectMeans((*answers)[i], xs[i]);
    if ((*answers)[i].ok()) {
      EXPECT_EQ((*answers)[i]->request_id, i % 2 ? "same" : "");
    }
  }
}

TEST_F(ClientStreamTest, NoRequestsNoAnswers) {
  absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> answers = client_->ExecuteStream({});
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_TRUE(answers->empty());
}

// The stream's own failure is the returned status, not an item's: nothing listens on port 1.
TEST_F(ClientStreamTest, StreamFailureIsTheReturnedStatus) {
  ClientOptions options = client_->options();
  options.target = "127.0.0.1:1";
  absl::StatusOr<std::unique_ptr<Client>> nowhere = Client::Connect(options);
  ASSERT_TRUE(nowhere.ok()) << nowhere.status();
  const Tensor x = RandomTensor(DType::kF32, {1, 4, 4}, 7);
  absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> answers =
      (*nowhere)->ExecuteStream({MeanPoolingRequest(x, "a"), MeanPoolingRequest(x, "b")});
  EXPECT_EQ(answers.status().code(), absl::StatusCode::kUnavailable) << answers.status();
}

}  // namespace
}  // namespace kernelserve
