// kernelserve-server over TLS and mTLS, with certificates made by openssl at test time, called
// through kernelserve::Client's TLS options.
#include <memory>
#include <string>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/server/tls_files.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

class ServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TlsFiles> files = MakeTlsFiles();
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = *std::move(files);
  }

  // A client of `server` over TLS trusting `ca_file` ("" = the system's roots), presenting
  // `cert_file` and `key_file` when given.
  std::unique_ptr<Client> Connect(const ServerProcess& server, const std::string& ca_file,
                                  const std::string& cert_file = "",
                                  const std::string& key_file = "") {
    ClientOptions options;
    options.target = server.address();
    options.use_tls = true;
    options.tls = {ca_file, cert_file, key_file};
    options.deadline = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  TlsFiles files_;
};

// A mean_pooling call on `client`, checked against the reference.
void ExpectMeanPoolingWorks(const Client& client) {
  const Tensor x = RandomTensor(DType::kF32, {2, 6, 10}, 91);
  absl::StatusOr<RunResult> r = client.MeanPooling(x);
  ASSERT_TRUE(r.ok()) << r.status();
  AllCloseResult close =
      AllClose(r->outputs.at("out").ToDoubles(), MeanPoolingReference(x), 1e-5, 1e-6);
  EXPECT_TRUE(close.ok) << close.message;
}

// The code of a GetServerInfo call that the handshake must refuse.
absl::StatusCode RefusedCode(const Client* client) {
  if (client == nullptr) return absl::StatusCode::kUnknown;
  return client->ServerInfo().status().code();
}

TEST_F(ServerTlsTest, MutualTlsAcceptsOnlyClientsWithACertificateFromTheCa) {
  ServerProcess server;
  ASSERT_TRUE(server
                  .Start({"--cache=memory", "--tls-cert=" + files_.server_cert,
                          "--tls-key=" + files_.server_key, "--tls-client-ca=" + files_.ca_cert})
                  .ok());
  EXPECT_NE(server.startup_line().find("(mtls"), std::string::npos) << server.startup_line();

  std::unique_ptr<Client> trusted =
      Connect(server, files_.ca_cert, files_.client_cert, files_.client_key);
  ASSERT_NE(trusted, nullptr);
  absl::StatusOr<v1::ServerInfo> info = trusted->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version().empty());
  ExpectMeanPoolingWorks(*trusted);

  // No certificate, or one from a CA the server does not trust: the handshake fails.
  std::unique_ptr<Client> anonymous = Connect(server, files_.ca_cert);
  EXPECT_EQ(RefusedCode(anonymous.get()), absl::StatusCode::kUnavailable);
  std::unique_ptr<Client> stranger =
      Connect(server, files_.ca_cert, files_.stranger_cert, files_.stranger_key);
  EXPECT_EQ(RefusedCode(stranger.get()), absl::StatusCode::kUnavailable);
  ClientOptions plain;
  plain.target = server.address();
  plain.deadline = absl::Seconds(5);
  EXPECT_EQ(RefusedCode(Client::Connect(plain)->get()), absl::StatusCode::kUnavailable);

  // The trusted client still works after the refusals.
  EXPECT_TRUE(trusted->ServerInfo().ok());
  EXPECT_EQ(*server.Stop(), 0);
}

TEST_F(ServerTlsTest, TlsWithoutClientCaServesClientsThatTrustTheCa) {
  ServerProcess server;
  ASSERT_TRUE(server
                  .Start({"--cache=memory", "--tls-cert=" + files_.server_cert,
                          "--tls-key=" + files_.server_key})
                  .ok());
  EXPECT_NE(server.startup_line().find("(tls"), std::string::npos) << server.startup_line();
  EXPECT_EQ(server.startup_line().find("mtls"), std::string::npos) << server.startup_line();

  std::unique_ptr<Client> client = Connect(server, files_.ca_cert);
  ASSERT_NE(client, nullptr);
  ExpectMeanPoolingWorks(*client);
  // A client certificate is not asked for, and does no harm.
  std::unique_ptr<Client> with_cert =
      Connect(server, files_.ca_cert, files_.client_cert, files_.client_key);
  ASSERT_NE(with_cert, nullptr);
  EXPECT_TRUE(with_cert->ServerInfo().ok());

  // A client that does not trust the CA refuses the server; a plaintext one cannot talk to it.
  std::unique_ptr<Client> distrustful = Connect(server, files_.other_ca_cert);
  EXPECT_EQ(RefusedCode(distrustful.get()), absl::StatusCode::kUnavailable);
  ClientOptions plain;
  plain.target = server.address();
  plain.deadline = absl::Seconds(5);
  EXPECT_EQ(RefusedCode(Client::Connect(plain)->get()), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*server.Stop(), 0);
}

TEST_F(ServerTlsTest, TlsServesOnAUnixSocket) {
  const std::string target = "unix:" + MakeTempDir("tls-unix") + "/kernelserve.sock";
  ServerProcess server;
  ASSERT_TRUE(server
                  .Start({"--cache=memory", "--listen=" + target,
                          "--tls-cert=" + files_.server_cert, "--tls-key=" + files_.server_key})
                  .ok());
  EXPECT_EQ(server.address(), target);
  std::unique_ptr<Client> client = Connect(server, files_.ca_cert);
  ASSERT_NE(client, nullptr);
  ExpectMeanPoolingWorks(*client);
  EXPECT_EQ(*server.Stop(), 0);
}

}  // namespace
}  // namespace kernelserve::testing
