// The token file, the Authenticator's identities and roles, and the per-identity quotas
// (server/auth.h, server/tenants.h), on the CPU without a server.
#include "server/auth.h"

#include <openssl/sha.h>

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/tenants.h"

namespace kernelserve::server {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  std::string hex;
  for (unsigned char byte : digest) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 15];
  }
  return hex;
}

// A peer lookup that knows one peer string.
class FakePeers final : public PeerLookup {
 public:
  FakePeers(std::string peer, PeerCredentials credentials)
      : peer_(std::move(peer)), credentials_(credentials) {}
  PeerCredentials Find(std::string_view peer) const override {
    return peer == peer_ ? credentials_ : PeerCredentials();
  }

 private:
  const std::string peer_;
  const PeerCredentials credentials_;
};

absl::StatusOr<Caller> WithToken(const Authenticator& auth, const std::string& value,
                                 const std::string& peer = "ipv4:127.0.0.1:1") {
  Metadata metadata;
  if (!value.empty()) metadata.emplace("authorization", value);
  return auth.Authenticate(metadata, peer, nullptr);
}

TEST(TokenFileTest, IdentitiesRolesHashesAndTheOldSingleTokenForm) {
  const std::string text =
      "# tokens\n\nalice caller a-token\n  bob admin sha256:" + Sha256Hex("b-token") +
      "  \nlegacy-token\n";
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text, "tokens.txt");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].identity, "alice");
  EXPECT_EQ((*entries)[0].role, Role::kCaller);
  EXPECT_EQ((*entries)[0].line, 3);
  EXPECT_EQ((*entries)[1].identity, "bob");
  EXPECT_EQ((*entries)[1].role, Role::kAdmin);
  EXPECT_EQ((*entries)[2].identity, "default");
  EXPECT_EQ((*entries)[2].role, Role::kAdmin);

  AuthOptions options;
  options.tokens = *entries;
  auto auth = Authenticator::Create(options, nullptr);
  ASSERT_TRUE(auth.ok());
  absl::StatusOr<Caller> bob = WithToken(**auth, "Bearer b-token");
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->identity, "bob");
  EXPECT_TRUE(bob->admin());
  absl::StatusOr<Caller> alice = WithToken(**auth, "bearer a-token");  // the scheme in any case
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->identity, "alice");
  EXPECT_FALSE(alice->admin());
  EXPECT_EQ(WithToken(**auth, "Bearer legacy-token")->identity, "default");
  EXPECT_EQ((*auth)->TokenIdentities(), (std::vector<std::string>{"alice", "bob", "default"}));
}

TEST(TokenFileTest, BadLinesNameTheLineAndWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"alice caller\n", "line 1: expected IDENTITY ROLE TOKEN"},
      {"# c\nalice root t\n", "line 2: role: expected caller or admin"},
      {"al ice admin t x\n", "got 5 fields"},
      {"al/ice admin t\n", "line 1: identity"},
      {"alice admin sha256:abc\n", "expected 64 hex digits"},
      {"alice admin sha256:" + std::string(64, 'g') + "\n", "not a hex digit"},
      {"alice admin t\nbob caller t\n", "line 2: the same token as line 1"},
      {"alice admin t\nbob caller sha256:" + Sha256Hex("t") + "\n", "the same token as line 1"},
      {"\n# only comments\n", "the file holds no token"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text, "f");
    ASSERT_FALSE(entries.ok()) << text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(entries.status().message().find(message), std::string::npos)
        << entries.status().message();
    EXPECT_NE(entries.status().message().find("--auth-token-file=f"), std::string::npos);
  }
}

TEST(AuthenticatorTest, TokensAreRequiredAndCompared) {
  AuthOptions options;
  options.tokens = *ParseTokenFile("alice caller s3cret\n", "f");
  auto auth = *Authenticator::Create(options, nullptr);
  for (const std::string value :
       {"", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"}) {
    absl::StatusOr<Caller> caller = WithToken(*auth, value);
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated) << value;
  }
  EXPECT_TRUE(WithToken(*auth, "Bearer s3cret").ok());
}

TEST(AuthenticatorTest, AdminIdentitiesPromoteCallers) {
  AuthOptions options;
  options.tokens = *ParseTokenFile("alice caller a\nbob caller b\n", "f");
  options.admin_identities = {"bob"};
  auto auth = *Authenticator::Create(options, nullptr);
  EXPECT_FALSE(WithToken(*auth, "Bearer a")->admin());
  EXPECT_TRUE(WithToken(*auth, "Bearer b")->admin());

  options.admin_identities = {"uid:12x"};
  EXPECT_EQ(Authenticator::Create(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.admin_identities = {"cert:CN=ops", "uid:1000", "alice"};
  EXPECT_TRUE(Authenticator::Create(options, nullptr).ok());
}

TEST(AuthenticatorTest, WithoutTokensCallersAreAnonymousOrTheirUnixUid) {
  PeerCredentials unix_peer;
  unix_peer.uid = 4321;
  unix_peer.gid = 4321;
  unix_peer.pid = 77;
  FakePeers peers("fd:9", unix_peer);
  AuthOptions options;
  options.anonymous_role = Role::kCaller;
  options.admin_identities = {"uid:4000"};
  auto auth = *Authenticator::Create(options, &peers);

  absl::StatusOr<Caller> tcp = WithToken(*auth, "", "ipv4:127.0.0.1:5");
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->identity, "anonymous");
  EXPECT_EQ(tcp->role, Role::kCaller);
  EXPECT_FALSE(tcp->peer.uid.has_value());

  absl::StatusOr<Caller> local = WithToken(*auth, "Bearer ignored", "fd:9");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->identity, "uid:4321");
  EXPECT_EQ(local->role, Role::kCaller);  // neither the server's uid nor an admin identity
  EXPECT_EQ(local->peer.pid, 77);
  EXPECT_EQ(local->peer.DebugString(), "uid 4321 gid 4321 pid 77");
}

TEST(AuthenticatorTest, TheDefaultAnonymousRoleIsAdmin) {
  auto auth = *Authenticator::Create(AuthOptions(), nullptr);
  absl::StatusOr<Caller> caller = WithToken(*auth, "");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->identity, "anonymous");
  EXPECT_TRUE(caller->admin());
  EXPECT_NE(auth->Describe().find("anonymous (admin)"), std::string::npos) << auth->Describe();
}

TEST(TenantTest, RateBucketRefillsAtItsRate) {
  QuotaOptions quota;
  quota.requests_per_second = 10;
  quota.request_burst = 2;
  Tenant tenant("alice", "alice", quota);
  const Tenant::Clock::time_point t0 = Tenant::Clock::now();
  EXPECT_TRUE(tenant.TakeRequest(t0).ok());
  EXPECT_TRUE(tenant.TakeRequest(t0).ok());
  absl::Status refused = tenant.TakeRequest(t0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("identity 'alice'"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("--quota-requests-per-second=10"), std::string::npos);
  // 0.1 s later one call's worth is back, not two.
  const auto later = t0 + std::chrono::milliseconds(100);
  EXPECT_TRUE(tenant.TakeRequest(later).ok());
  EXPECT_EQ(tenant.TakeRequest(later).code(), absl::StatusCode::kResourceExhausted);
  // Without a rate, never refused.
  Tenant free("bob", "bob", QuotaOptions());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(free.TakeRequest(t0).ok());
}

TEST(TenantTest, InflightQuotaTakesNothingWhenRefused) {
  QuotaOptions quota;
  quota.inflight_bytes = 1000;
  Tenant tenant("alice", "alice", quota);
  EXPECT_TRUE(tenant.Hold(600, "request").ok());
  absl::Status refused = tenant.Hold(500, "outputs");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--quota-inflight-bytes=1000"), std::string::npos) << refused;
  EXPECT_EQ(tenant.held(), 600);
  tenant.Release(600);
  EXPECT_TRUE(tenant.Hold(1000, "request").ok());
}

TEST(TenantsTest, LabelsAreBoundedAndRefusalsReported) {
  QuotaOptions quota;
  quota.max_labels = 3;
  quota.requests_per_second = 1;
  std::vector<std::string> refusals;
  Tenants tenants(quota, {"alice", "bob"}, [&](const std::string& label, const char* what) {
    refusals.push_back(label + ":" + what);
  });
  EXPECT_EQ(tenants.Of("alice")->label(), "alice");
  EXPECT_EQ(tenants.Of("uid:1")->label(), "uid:1");
  EXPECT_EQ(tenants.Of("uid:2")->label(), "other");
  EXPECT_EQ(tenants.Of("uid:1").get(), tenants.Of("uid:1").get());
  EXPECT_EQ(tenants.Labels(), (std::vector<std::string>{"alice", "bob", "uid:1"}));
  EXPECT_TRUE(tenants.Admit("uid:2").ok());
  EXPECT_EQ(tenants.Admit("uid:2").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refusals, (std::vector<std::string>{"other:rate"}));
}

}  // namespace
}  // namespace kernelserve::server
