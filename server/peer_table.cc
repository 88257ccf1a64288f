#include "server/peer_table.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kernelserve::server {
namespace {

// Owners remembered at most; past it the cache starts over (each entry is re-read on demand).
constexpr size_t kMaxCachedOwners = 4096;

// /proc/net/tcp's states that are not a connection's live socket.
constexpr uint32_t kStateTimeWait = 0x06;
constexpr uint32_t kStateListen = 0x0A;

TcpEndpoint MappedIpv4(const uint8_t (&ipv4)[4], uint16_t port) {
  TcpEndpoint endpoint;
  endpoint.address[10] = 0xff;
  endpoint.address[11] = 0xff;
  std::memcpy(endpoint.address.data() + 12, ipv4, 4);
  endpoint.port = port;
  return endpoint;
}

// `text` with each %XX replaced by the byte it encodes; nullopt for a malformed escape.
std::optional<std::string> PercentDecoded(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int byte = 0;
    if (i + 2 >= text.size() || !absl::SimpleHexAtoi(text.substr(i + 1, 2), &byte)) {
      return std::nullopt;
    }
    out += static_cast<char>(byte);
    i += 2;
  }
  return out;
}

std::optional<uint16_t> ParsePort(absl::string_view text) {
  uint32_t port = 0;
  if (text.empty() || !absl::SimpleAtoi(text, &port) || port > 0xffff) return std::nullopt;
  return static_cast<uint16_t>(port);
}

// "127.0.0.1:40000".
std::optional<TcpEndpoint> ParseIpv4Peer(absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  std::optional<uint16_t> port = ParsePort(text.substr(colon + 1));
  in_addr ipv4;
  if (!port || inet_pton(AF_INET, std::string(text.substr(0, colon)).c_str(), &ipv4) != 1) {
    return std::nullopt;
  }
  uint8_t bytes[4];
  std::memcpy(bytes, &ipv4, sizeof(bytes));
  return MappedIpv4(bytes, *port);
}

// "[::1]:40000", or with the brackets percent-encoded ("%5B::1%5D:40000").
std::optional<TcpEndpoint> ParseIpv6Peer(absl::string_view encoded) {
  std::optional<std::string> text = PercentDecoded(encoded);
  if (!text || text->empty() || (*text)[0] != '[') return std::nullopt;
  const size_t close = text->rfind("]:");
  if (close == std::string::npos) return std::nullopt;
  std::optional<uint16_t> port = ParsePort(absl::string_view(*text).substr(close + 2));
  in6_addr ipv6;
  if (!port || inet_pton(AF_INET6, text->substr(1, close - 1).c_str(), &ipv6) != 1) {
    return std::nullopt;
  }
  TcpEndpoint endpoint;
  std::memcpy(endpoint.address.data(), &ipv6, endpoint.address.size());
  endpoint.port = *port;
  return endpoint;
}

// One address word of /proc/net/tcp: 8 hex digits, the kernel's 32-bit value in host order.
bool ParseWord(absl::string_view hex, uint8_t* out) {
  uint32_t word = 0;
  if (hex.size() != 8 || !absl::SimpleHexAtoi(hex, &word)) return false;
  std::memcpy(out, &word, sizeof(word));
  return true;
}

// "0100007F:9C40" (IPv4) or 32 hex digits and a port (IPv6), as /proc/net/tcp{,6} write them.
std::optional<TcpEndpoint> ParseTableEndpoint(absl::string_view text) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  const absl::string_view address = text.substr(0, colon);
  uint32_t port = 0;
  if (!absl::SimpleHexAtoi(text.substr(colon + 1), &port) || port > 0xffff) return std::nullopt;
  if (address.size() == 8) {
    uint8_t ipv4[4];
    if (!ParseWord(address, ipv4)) return std::nullopt;
    return MappedIpv4(ipv4, static_cast<uint16_t>(port));
  }
  if (address.size() != 32) return std::nullopt;
  TcpEndpoint endpoint;
  for (size_t word = 0; word < 4; ++word) {
    if (!ParseWord(address.substr(word * 8, 8), endpoint.address.data() + word * 4)) {
      return std::nullopt;
    }
  }
  endpoint.port = static_cast<uint16_t>(port);
  return endpoint;
}

// One entry of a socket table: "sl local remote st tx:rx tr:when retrnsmt uid ...".
struct TableEntry {
  TcpEndpoint local;
  TcpEndpoint remote;
  uint32_t state = 0;
  uid_t uid = 0;
};

std::optional<TableEntry> ParseTableLine(absl::string_view line) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.size() < 8 || !absl::EndsWith(fields[0], ":")) return std::nullopt;
  std::optional<TcpEndpoint> local = ParseTableEndpoint(fields[1]);
  std::optional<TcpEndpoint> remote = ParseTableEndpoint(fields[2]);
  TableEntry entry;
  if (!local || !remote || !absl::SimpleHexAtoi(fields[3], &entry.state) ||
      !absl::SimpleAtoi(fields[7], &entry.uid)) {
    return std::nullopt;
  }
  entry.local = *local;
  entry.remote = *remote;
  return entry;
}

std::string ReadText(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

bool TcpEndpoint::loopback() const {
  static constexpr std::array<uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0,    0,
                                                            0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(kMappedPrefix.begin(), kMappedPrefix.end(), address.begin())) {
    return address[12] == 127;
  }
  for (size_t i = 0; i < 15; ++i) {
    if (address[i] != 0) return false;
  }
  return address[15] == 1;
}

std::optional<TcpEndpoint> EndpointOf(const sockaddr* address, socklen_t length) {
  if (address->sa_family == AF_INET && length >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    sockaddr_in ipv4;
    std::memcpy(&ipv4, address, sizeof(ipv4));
    uint8_t bytes[4];
    std::memcpy(bytes, &ipv4.sin_addr, sizeof(bytes));
    return MappedIpv4(bytes, ntohs(ipv4.sin_port));
  }
  if (address->sa_family == AF_INET6 && length >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    sockaddr_in6 ipv6;
    std::memcpy(&ipv6, address, sizeof(ipv6));
    TcpEndpoint endpoint;
    std::memcpy(endpoint.address.data(), &ipv6.sin6_addr, endpoint.address.size());
    endpoint.port = ntohs(ipv6.sin6_port);
    return endpoint;
  }
  return std::nullopt;
}

std::optional<TcpEndpoint> ParsePeerEndpoint(std::string_view peer) {
  absl::string_view rest(peer.data(), peer.size());
  if (absl::ConsumePrefix(&rest, "ipv4:")) return ParseIpv4Peer(rest);
  if (absl::ConsumePrefix(&rest, "ipv6:")) return ParseIpv6Peer(rest);
  return std::nullopt;
}

std::optional<uid_t> FindSocketOwner(std::string_view table, const TcpEndpoint& local,
                                     uint16_t remote_port) {
  std::optional<uid_t> owner;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(table.data(), table.size()), '\n')) {
    std::optional<TableEntry> entry = ParseTableLine(line);
    if (!entry || entry->state == kStateListen || entry->state == kStateTimeWait) continue;
    if (entry->local != local || entry->remote.port != remote_port) continue;
    if (owner && *owner != entry->uid) return std::nullopt;
    owner = entry->uid;
  }
  return owner;
}

void PeerTable::RecordUnix(int fd, const PeerCredentials& credentials) {
  absl::MutexLock lock(&mu_);
  unix_peers_[fd] = credentials;
}

void PeerTable::ForgetTcp(const TcpEndpoint& peer) {
  absl::MutexLock lock(&mu_);
  tcp_owners_.erase(peer);
}

PeerCredentials PeerTable::Find(std::string_view peer) const {
  absl::string_view rest(peer.data(), peer.size());
  PeerCredentials credentials;
  int fd = -1;
  if (absl::ConsumePrefix(&rest, "fd:")) {
    if (!absl::SimpleAtoi(rest, &fd)) return credentials;
    absl::MutexLock lock(&mu_);
    auto found = unix_peers_.find(fd);
    return found == unix_peers_.end() ? credentials : found->second;
  }
  std::optional<TcpEndpoint> endpoint = ParsePeerEndpoint(peer);
  if (!endpoint || !endpoint->loopback() || server_port_ == 0) return credentials;
  {
    absl::MutexLock lock(&mu_);
    auto found = tcp_owners_.find(*endpoint);
    if (found != tcp_owners_.end()) {
      credentials.uid = found->second;
      return credentials;
    }
  }
  credentials.uid = ReadOwner(*endpoint);
  if (credentials.uid) {
    absl::MutexLock lock(&mu_);
    if (tcp_owners_.size() >= kMaxCachedOwners) tcp_owners_.clear();
    tcp_owners_[*endpoint] = *credentials.uid;
  }
  return credentials;
}

std::optional<uid_t> PeerTable::ReadOwner(const TcpEndpoint& peer) const {
  const std::string tables = ReadText("/proc/net/tcp") + "\n" + ReadText("/proc/net/tcp6");
  return FindSocketOwner(tables, peer, server_port_);
}

}  // namespace kernelserve::server
