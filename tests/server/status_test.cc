// The one conversion of a status for clients (server/status.h): codes kept, messages at most
// 1 KiB with the mark of the cut, exceptions turned into statuses.
#include "server/status.h"

#include <stdexcept>
#include <string>

#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

TEST(StatusTest, MessagesAreAtMostOneKibMarkIncluded) {
  const std::string fits(kMaxStatusMessageBytes, 'a');
  EXPECT_EQ(ClientMessage(absl::InvalidArgumentError(fits)), fits);
  for (size_t size : {kMaxStatusMessageBytes + 1, size_t{1} << 20, size_t{300} << 20}) {
    const std::string message = ClientMessage(absl::InvalidArgumentError(std::string(size, 'b')));
    EXPECT_LE(message.size(), kMaxStatusMessageBytes) << size;
    EXPECT_NE(message.find("...(" + std::to_string(size) + " bytes)"), std::string::npos)
        << message.substr(message.size() - 40);
  }
  // No UTF-8 character is cut: a 3-byte one straddling the cut is left out whole.
  std::string text(kMaxStatusMessageBytes - 33, 'c');
  text += "\xe2\x82\xac";  // one character, the euro sign
  text += std::string(2000, 'd');
  const std::string message = ClientMessage(absl::InvalidArgumentError(text));
  EXPECT_LE(message.size(), kMaxStatusMessageBytes);
  EXPECT_EQ(message.find("\xe2\x82"), std::string::npos) << "a character split";
  const grpc::Status converted = ToGrpcStatus(absl::ResourceExhaustedError(text));
  EXPECT_EQ(converted.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(converted.error_message(), message);
}

TEST(StatusTest, ExceptionsBecomeStatuses) {
  EXPECT_EQ(RunGuarded([]() -> absl::Status { throw std::bad_alloc(); }).code(),
            absl::StatusCode::kResourceExhausted);
  const absl::Status thrown =
      RunGuarded([]() -> absl::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_NE(thrown.message().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace kernelserve::server
