// The C++ client's resident tensors against a real kernelserve-server process.
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/client/e2e/client_fixture.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

class ClientResidentTest : public ClientServerTest {
 protected:
  void TearDown() override {
    absl::StatusOr<int> deleted = client_->DeleteTensor("");  // every tensor of the suite's
    EXPECT_TRUE(deleted.ok()) << deleted.status();
  }
};

TEST_F(ClientResidentTest, InputAndOutputByNameEqualTheInlineCall) {
  const Tensor x = RandomTensor(DType::kF32, {3, 17, 8}, 21);
  absl::StatusOr<v1::CreateTensorResponse> created = client_->CreateTensor("x", x);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->created());
  EXPECT_EQ(created->tensor().dtype(), v1::DTYPE_F32);
  EXPECT_EQ(
      std::vector<int64_t>(created->tensor().shape().begin(), created->tensor().shape().end()),
      (std::vector<int64_t>{3, 17, 8}));
  EXPECT_EQ(created->tensor().byte_size(), x.nbytes());
  ASSERT_TRUE(client_->CreateTensor("pooled", TensorSpec{DType::kF32, {3, 8}}).ok());

  MeanPoolingOptions options;
  options.run.resident_inputs["x"] = "x";
  options.run.resident_outputs["out"] = "pooled";
  absl::StatusOr<RunResult> by_name = client_->MeanPooling(Tensor(), options);
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->outputs.count("out"), 0u);  // in the resident tensor, not here
  absl::StatusOr<Tensor> pooled = client_->ReadTensor("pooled");
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  absl::StatusOr<RunResult> inline_call = client_->MeanPooling(x);
  ASSERT_TRUE(inline_call.ok()) << inline_call.status();
  EXPECT_EQ(pooled->shape(), (Shape{3, 8}));
  EXPECT_EQ(pooled->bytes(), inline_call->outputs.at("out").bytes());
  AllCloseResult close = AllClose(pooled->ToDoubles(), MeanOverRows(x), 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;

  // The same input named and given is refused before the call.
  absl::StatusOr<RunResult> both = client_->MeanPooling(x, options);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument) << both.status();
}

TEST_F(ClientResidentTest, WriteReadListDeleteAndErrors) {
  ASSERT_TRUE(client_->CreateTensor("w", TensorSpec{DType::kF32, {4, 2}}).ok());
  // Idempotent with the same spec; ALREADY_EXISTS with another.
  absl::StatusOr<v1::CreateTensorResponse> again =
      client_->CreateTensor("w", TensorSpec{DType::kF32, {4, 2}});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  EXPECT_EQ(client_->CreateTensor("w", TensorSpec{DType::kF32, {2, 4}}).status().code(),
            absl::StatusCode::kAlreadyExists);

  const Tensor rows = Tensor::FromFloats(DType::kF32, {2, 2}, {1, 2, 3, 4});
  WriteTensorOptions at_row;
  at_row.row = 1;
  absl::StatusOr<v1::ResidentTensorInfo> written = client_->WriteTensor("w", rows, at_row);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->name(), "w");
  WriteTensorOptions at_byte;
  at_byte.byte_offset = 4;  // element [0, 1]
  ASSERT_TRUE(client_->WriteTensor("w", Tensor::FromFloats(DType::kF32, {1}, {9}), at_byte).ok());
  absl::StatusOr<Tensor> all = client_->ReadTensor("w");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->ToFloats(), (std::vector<float>{0, 9, 1, 2, 3, 4, 0, 0}));
  absl::StatusOr<Tensor> middle = client_->ReadTensor("w", 1, 2);
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->shape(), (Shape{2, 2}));
  EXPECT_EQ(middle->ToFloats(), (std::vector<float>{1, 2, 3, 4}));

  // Past the end: INVALID_ARGUMENT, nothing written.
  WriteTensorOptions past;
  past.row = 3;
  EXPECT_EQ(client_->WriteTensor("w", rows, past).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ReadTensor("w", 3, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ReadTensor("w")->ToFloats(), all->ToFloats());

  absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->tensors_size(), 1);
  EXPECT_EQ(list->tensors(0).name(), "w");
  EXPECT_EQ(list->tensors(0).byte_size(), 32u);
  EXPECT_GT(list->server_started_unix_ms(), 0);

  // Unknown names: NOT_FOUND, in a call too.
  EXPECT_EQ(client_->ReadTensor("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->WriteTensor("nope", rows).status().code(), absl::StatusCode::kNotFound);
  RunOptions run;
  run.resident_inputs["x"] = "nope";
  EXPECT_EQ(client_->Call("mean_pooling", {}, {}, run).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<int> deleted = client_->DeleteTensor("w");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  EXPECT_EQ(client_->DeleteTensor("w").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kernelserve
