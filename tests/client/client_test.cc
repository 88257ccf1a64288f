// Client tests that need no server: option checks, status conversion, response conversion,
// and a call to a port where nothing listens.
#include "client/client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/status_convert.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

// A loopback port that was free a moment ago (bound, then closed).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Connect's status for the defaults changed by `edit`.
template <typename Edit>
absl::StatusCode ConnectCode(Edit edit) {
  ClientOptions options;
  edit(options);
  return Client::Connect(options).status().code();
}

TEST(ConnectTest, ChecksOptions) {
  EXPECT_TRUE(Client::Connect(ClientOptions()).ok());
  EXPECT_EQ(ConnectCode([](ClientOptions& o) { o.target = ""; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectCode([](ClientOptions& o) { o.max_message_bytes = 0; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectCode([](ClientOptions& o) { o.max_message_bytes = int64_t{1} << 31; }),
            absl::StatusCode::kInvalidArgument);
  ClientOptions missing_ca;
  missing_ca.use_tls = true;
  missing_ca.tls.ca_file = "/nonexistent/ca.pem";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(missing_ca);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(client.status().message().find("/nonexistent/ca.pem"), std::string::npos);
  EXPECT_EQ(ConnectCode([](ClientOptions& o) {
              o.use_tls = true;
              o.tls.cert_file = "/nonexistent/c.pem";
            }),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConnectTest, NoServerIsUnavailable) {
  ClientOptions options;
  options.target = "127.0.0.1:" + std::to_string(UnusedPort());
  options.deadline = absl::Seconds(10);
  std::unique_ptr<Client> client = Client::Connect(options).value();
  EXPECT_EQ(client->ServerInfo().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client->Health().status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<RunResult> run = client->MeanPooling(RandomTensor(DType::kF32, {2, 3, 4}, 1));
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable);
}

TEST(StatusConvertTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "queue full");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")).code(),
            absl::StatusCode::kUnauthenticated);
  v1::RpcStatus in_band;
  in_band.set_code(3);
  in_band.set_message("input 'x': bad");
  EXPECT_EQ(FromRpcStatus(in_band), absl::InvalidArgumentError("input 'x': bad"));
  in_band.set_code(99);
  EXPECT_EQ(FromRpcStatus(in_band).code(), absl::StatusCode::kUnknown);
}

TEST(TakeRunResultTest, ConvertsEveryField) {
  v1::ExecuteResponse response;
  const Tensor out = RandomTensor(DType::kF16, {2, 4}, 5);
  PutTensor(out, &(*response.mutable_outputs())["out"]);
  response.mutable_config()->set_block_size(64);
  response.set_config_source(v1::CONFIG_SOURCE_MEMORY);
  response.set_platform("cpu");
  response.set_device(-1);
  response.set_cache_key("mean_pooling@v1:abc");
  response.mutable_timing()->set_kernel_us(7);
  response.mutable_timing()->set_launch_us(3);
  response.mutable_timing()->set_total_us(11);
  response.add_warnings("slow");
  absl::StatusOr<RunResult> r = TakeRunResult(&response);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs.at("out").bytes(), out.bytes());
  EXPECT_EQ(r->outputs.at("out").shape(), out.shape());
  EXPECT_EQ(r->config.block_size, 64);
  EXPECT_EQ(r->source, ConfigSource::kMemory);
  EXPECT_EQ(r->platform, "cpu");
  EXPECT_EQ(r->cache_key, "mean_pooling@v1:abc");
  EXPECT_EQ(r->timings.kernel_us, 7);
  EXPECT_EQ(r->timings.launch_us, 3);
  EXPECT_EQ(r->timings.total_us, 11);
  EXPECT_EQ(r->warnings, std::vector<std::string>{"slow"});
}

TEST(TakeRunResultTest, InBandErrorAndMalformedOutput) {
  v1::ExecuteResponse failed;
  failed.mutable_status()->set_code(8);
  failed.mutable_status()->set_message("queue full");
  EXPECT_EQ(TakeRunResult(&failed).status(), absl::ResourceExhaustedError("queue full"));
  v1::ExecuteResponse malformed;
  v1::Tensor& out = (*malformed.mutable_outputs())["out"];
  out.set_dtype(v1::DTYPE_F32);
  out.add_shape(3);
  out.set_data(std::string(11, '\0'));
  absl::StatusOr<RunResult> r = TakeRunResult(&malformed);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("output 'out'"), std::string::npos);
  v1::ExecuteResponse unspecified;
  EXPECT_FALSE(TakeRunResult(&unspecified)->source.has_value());
}

TEST(HealthStatusNameTest, Names) {
  EXPECT_EQ(HealthStatusName(HealthStatus::kServing), "SERVING");
  EXPECT_EQ(HealthStatusName(HealthStatus::kNotServing), "NOT_SERVING");
  EXPECT_EQ(HealthStatusName(HealthStatus::kServiceUnknown), "SERVICE_UNKNOWN");
  EXPECT_EQ(HealthStatusName(HealthStatus::kUnknown), "UNKNOWN");
}

}  // namespace
}  // namespace kernelserve
