// The peer table (server/peer_table.h): gRPC peer strings, and the kernel's socket tables
// (/proc/net/tcp, /proc/net/tcp6) read for the owner of a loopback client's socket.
#include "server/peer_table.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <bit>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelserve::server {
namespace {

// --- peer strings ---

TEST(PeerEndpointTest, ReadsGrpcPeerStrings) {
  std::optional<TcpEndpoint> v4 = ParsePeerEndpoint("ipv4:127.0.0.1:40000");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->port, 40000);
  EXPECT_TRUE(v4->loopback());

  // gRPC writes the brackets of an IPv6 address percent-encoded.
  std::optional<TcpEndpoint> v6 = ParsePeerEndpoint("ipv6:%5B::1%5D:40001");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->port, 40001);
  EXPECT_TRUE(v6->loopback());
  EXPECT_EQ(ParsePeerEndpoint("ipv6:[::1]:40001"), v6);

  // An IPv4 address mapped into IPv6 is the IPv4 address.
  EXPECT_EQ(ParsePeerEndpoint("ipv6:%5B::ffff:127.0.0.1%5D:40000"), v4);

  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(40000);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(EndpointOf(reinterpret_cast<const sockaddr*>(&address), sizeof(address)), v4);

  EXPECT_FALSE(ParsePeerEndpoint("ipv4:10.1.2.3:5")->loopback());
  EXPECT_FALSE(ParsePeerEndpoint("ipv6:%5B2001:db8::1%5D:5")->loopback());
  EXPECT_TRUE(ParsePeerEndpoint("ipv4:127.8.9.10:5")->loopback());
}

TEST(PeerEndpointTest, AnythingElseIsNoEndpoint) {
  for (const char* peer :
       {"fd:12", "unix:", "unix:/run/ks.sock", "ipv4:127.0.0.1", "ipv4:127.0.0.1:70000",
        "ipv4:127.0.0.1:x", "ipv4:localhost:5", "ipv6:::1:5", "ipv6:%5Bzz%5D:5", "ipv6:%5G::1%5D:5",
        "ipv6:%5Bfe80::1%25eth0%5D:5", "", "ipv4:"}) {
    EXPECT_FALSE(ParsePeerEndpoint(peer).has_value()) << peer;
  }
}

// --- the kernel's socket tables ---

// /proc/net/tcp of a host where a client of uid 1000 on 127.0.0.1:40000 (9C40) is connected to
// a server on 127.0.0.1:50000 (C350); another socket of the client's port range waits in
// TIME_WAIT. Addresses as a little-endian kernel writes them.
constexpr char kTcpTable[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
    "   0: 0100007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "1001 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:9C40 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 "
    "1002 1 0000000000000000 20 4 30 10 -1\n"
    "   2: 0100007F:C350 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 "
    "1003 1 0000000000000000 20 4 30 10 -1\n"
    "   3: 0100007F:9C41 0100007F:C350 06 00000000:00000000 03:00001770 00000000     0        0 "
    "0 3 0000000000000000\n"
    "   4: 0100000A:9C44 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1003        0 "
    "1004 1 0000000000000000 20 4 30 10 -1\n";

// /proc/net/tcp6 of the same host: a client of uid 1001 on [::1]:40002 and one of uid 1002 on
// an IPv6 socket connected through the mapped address ::ffff:127.0.0.1, port 40003.
constexpr char kTcp6Table[] =
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000001000000:9C42 00000000000000000000000001000000:C350 01 "
    "00000000:00000000 00:00000000 00000000  1001        0 2001 1 0000000000000000 20 4 30 10 "
    "-1\n"
    "   1: 0000000000000000FFFF00000100007F:9C43 0000000000000000FFFF00000100007F:C350 01 "
    "00000000:00000000 00:00000000 00000000  1002        0 2002 1 0000000000000000 20 4 30 10 "
    "-1\n"
    "   2: 00000000000000000000000000000000:C350 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 "
    "0\n";

TcpEndpoint Peer(const char* peer) {
  std::optional<TcpEndpoint> endpoint = ParsePeerEndpoint(peer);
  EXPECT_TRUE(endpoint.has_value()) << peer;
  return endpoint.value_or(TcpEndpoint{});
}

class FindSocketOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::endian::native != std::endian::little) GTEST_SKIP() << "tables written little-endian";
  }
  const std::string tables_ = std::string(kTcpTable) + kTcp6Table;
};

TEST_F(FindSocketOwnerTest, FindsTheClientsSocket) {
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:40000"), 50000), 1000u);
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv6:%5B::1%5D:40002"), 50000), 1001u);
  // The client's IPv6 socket connected to ::ffff:127.0.0.1: the server sees an IPv4 peer.
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:40003"), 50000), 1002u);
  EXPECT_EQ(FindSocketOwner(kTcpTable, Peer("ipv4:10.0.0.1:40004"), 50000), 1003u);
}

TEST_F(FindSocketOwnerTest, IgnoresOtherSockets) {
  // The listening socket and TIME_WAIT. (The server's own end of a connection has the
  // server's port: FindsTheClientsSocket would see it disagree otherwise.)
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:50000"), 0), std::nullopt);
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:40001"), 50000), std::nullopt);
  // Another server's port, an address the client does not have, no such port.
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:40000"), 50001), std::nullopt);
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.2:40000"), 50000), std::nullopt);
  EXPECT_EQ(FindSocketOwner(tables_, Peer("ipv4:127.0.0.1:40009"), 50000), std::nullopt);
  EXPECT_EQ(FindSocketOwner("", Peer("ipv4:127.0.0.1:40000"), 50000), std::nullopt);
}

TEST_F(FindSocketOwnerTest, SkipsMalformedLinesAndRefusesDisagreement) {
  const std::string noisy = absl::StrCat(
      "garbage\n   9: zz:zz 0100007F:C350 01 0:0 0:0 0 1000 0 0\n\n   8: 0100007F:9C40\n",
      kTcpTable);
  EXPECT_EQ(FindSocketOwner(noisy, Peer("ipv4:127.0.0.1:40000"), 50000), 1000u);
  // The same line twice agrees; another owner of the same endpoint leaves it unknown.
  const std::string line =
      "   1: 0100007F:9C40 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000 0 1\n";
  const std::string other =
      "   5: 0100007F:9C40 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1005 0 1\n";
  EXPECT_EQ(FindSocketOwner(line + line, Peer("ipv4:127.0.0.1:40000"), 50000), 1000u);
  EXPECT_EQ(FindSocketOwner(line + other, Peer("ipv4:127.0.0.1:40000"), 50000), std::nullopt);
}

}  // namespace
}  // namespace kernelserve::server
