// tenancy_fuzz: what the server makes of who calls and of what callers name, before any kernel
// runs. The first byte picks one of:
//   0  a token file's text (ParseTokenFile) and a call's authorization value and peer
//      (Authenticator::Authenticate);
//   1  a token file written from entries read from the input (well-formed, or with a bad
//      identity, role or token, a token given twice, comments, blank lines, tabs, CRs);
//   2  a peer string (ParsePeerEndpoint, PeerTable::Find) and a socket address (EndpointOf);
//   3  a socket table's text (FindSocketOwner) as /proc/net/tcp{,6} might hold it;
//   4  a socket table written from entries read from the input, as the kernel writes it;
//   5  a --listen address (ParseListenAddress);
//   6  a region name or shm key (CheckRegionName, CheckObjectKey, Quoted);
//   7  an object's owner, group and mode and a caller's credentials (CheckObjectAccess);
//   8  an identity's quotas (Tenant's rate bucket and in-flight bytes, Tenants' labels);
//   9  an ExecuteBatchRequest (protobuf bytes) as ExecuteBatch counts it before any item runs:
//      ParamsOf, PlanCall, TakeBatchItems, BatchOutputBytes, CheckAnswerFits.
// Each checks the promises of the code it drives (see the Check* functions): parsed tokens
// authenticate to their identity and role, well-formed files parse, parsed endpoints and
// addresses read back the same when written again, the kernel's tables give the owner its
// entries name, names and keys are accepted exactly by their documented rules (refusals
// printable and short), access follows the kernel's rule, a rate never admits more than burst +
// rate x time and in-flight bytes never pass the quota, a batch counts each item's outputs from
// its own shapes. Never reads /proc (PeerTable is made for a Unix socket, port 0).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/executor.h"
#include "core/registry.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "core/utils/string_view.h"
#include "kernels/register.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "proto/convert.h"
#include "server/auth.h"
#include "server/batch_call.h"
#include "server/call.h"
#include "server/listener.h"
#include "server/options.h"
#include "server/peer_table.h"
#include "server/shared_memory.h"
#include "server/tenants.h"
#include "server/worker_pool.h"
#include "tests/fuzz/byte_reader.h"

namespace kernelserve::server {
namespace {

using fuzz::ByteReader;
using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "tenancy_fuzz: %s\n", what.c_str());
  std::abort();
}

void Expect(bool holds, const std::string& what) {
  if (!holds) Fail(what);
}

// What a refusal's message may be: printable ASCII, at most 1 KiB.
void ExpectClientMessage(const absl::Status& status, const char* what) {
  const absl::string_view message = status.message();
  Expect(!message.empty() && message.size() <= 1024,
         absl::StrCat(what, ": a message of ", message.size(), " bytes"));
  Expect(std::all_of(message.begin(), message.end(), [](char c) { return c >= ' ' && c <= '~'; }),
         absl::StrCat(what, ": a message with bytes that are not printable ASCII"));
}

std::array<unsigned char, 32> Sha256(std::string_view text) {
  std::array<unsigned char, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

std::string Hex(const std::array<unsigned char, 32>& digest, bool upper) {
  std::string out;
  for (unsigned char byte : digest) {
    absl::StrAppend(&out, upper ? absl::StrFormat("%02X", byte) : absl::StrFormat("%02x", byte));
  }
  return out;
}

// A string of 1 to `max` characters of `alphabet`, picked by the input.
std::string FromAlphabet(ByteReader& in, std::string_view alphabet, size_t max) {
  const size_t n = 1 + in.U8() % max;
  std::string out;
  for (size_t i = 0; i < n; ++i) out += alphabet[in.U8() % alphabet.size()];
  return out;
}

constexpr std::string_view kIdentityAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._@-";
constexpr std::string_view kTokenAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~+/=-";

// "Bearer TOKEN" with the scheme in a case the input picks.
std::string BearerValue(ByteReader& in, std::string_view token) {
  std::string scheme = "Bearer ";
  const uint8_t cases = in.U8();
  for (size_t i = 0; i < 6; ++i) {
    if (cases & (1u << i)) {
      scheme[i] = absl::ascii_isupper(scheme[i]) ? absl::ascii_tolower(scheme[i])
                                                 : absl::ascii_toupper(scheme[i]);
    }
  }
  return absl::StrCat(scheme, Sv(token));
}

absl::StatusOr<Caller> AuthenticateWith(const Authenticator& auth, const std::string* value,
                                        const std::string& peer) {
  Metadata metadata;
  static const std::string kKey = "authorization";
  if (value != nullptr) metadata.emplace(grpc::string_ref(kKey), grpc::string_ref(*value));
  return auth.Authenticate(metadata, peer, nullptr);
}

// --- 0, 1: token files and bearer tokens ---------------------------------------------------

bool IsTokenIdentity(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return kIdentityAlphabet.find(c) != std::string_view::npos;
  });
}

// The promises of a parsed file: valid identities ("default" for a token alone), lines in
// order, no token twice.
void CheckEntries(const std::vector<TokenEntry>& entries) {
  Expect(!entries.empty(), "ParseTokenFile: OK without an entry");
  int line = 0;
  std::set<std::array<unsigned char, 32>> digests;
  for (const TokenEntry& entry : entries) {
    Expect(IsTokenIdentity(entry.identity), "ParseTokenFile: identity '" + entry.identity + "'");
    Expect(entry.line > line, "ParseTokenFile: lines out of order");
    line = entry.line;
    Expect(digests.insert(entry.digest).second, "ParseTokenFile: a token twice");
  }
}

void RawTokenFile(ByteReader& in) {
  const std::string text = in.LongString();
  const std::string value = in.String();
  const std::string peer = in.String();
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text, "tokens");
  if (!entries.ok()) {
    Expect(absl::IsInvalidArgument(entries.status()), "ParseTokenFile: not InvalidArgument");
    Expect(entries.status().message().find("--auth-token-file=tokens") != std::string::npos,
           "ParseTokenFile: a refusal without the file's name");
    return;
  }
  CheckEntries(*entries);
  AuthOptions options;
  options.tokens = *entries;
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(options, nullptr);
  Expect(auth.ok(), "Authenticator::Create: " + std::string(auth.status().message()));
  absl::StatusOr<Caller> caller = AuthenticateWith(**auth, &value, peer);
  // The token the value carries, if it is a bearer value.
  std::optional<std::string_view> token;
  if (value.size() >= 7 &&
      absl::EqualsIgnoreCase(absl::string_view(value).substr(0, 7), "bearer ")) {
    token = std::string_view(value).substr(7);
  }
  const TokenEntry* match = nullptr;
  if (token) {
    for (const TokenEntry& entry : *entries) {
      if (entry.digest == Sha256(*token)) match = &entry;
    }
  }
  if (match == nullptr) {
    Expect(absl::IsUnauthenticated(caller.status()), "Authenticate: a value that matches no token");
    return;
  }
  Expect(caller.ok() && caller->identity == match->identity && caller->role == match->role,
         "Authenticate: a token of the file did not give its identity and role");
}

struct WrittenEntry {
  std::string identity;  // "" for a token alone on its line
  std::string role;
  std::string token;  // the token itself (the file may hold its digest)
  bool well_formed = true;
};

void BuiltTokenFile(ByteReader& in) {
  std::vector<WrittenEntry> written;
  std::string text;
  bool well_formed = true, twice = false;
  std::set<std::string> tokens;
  for (int n = in.U8() % 8; n > 0; --n) {
    const uint8_t kind = in.U8();
    auto separator = [&] { return std::string(1 + kind % 3, (kind & 4) ? '\t' : ' '); };
    if (kind % 5 == 0) {  // a comment or a blank line
      std::string comment = in.String();
      std::replace(comment.begin(), comment.end(), '\n', ' ');
      absl::StrAppend(&text, (kind & 8) ? "#" + comment : std::string(kind % 3, ' '), "\n");
      continue;
    }
    WrittenEntry entry;
    const bool alone = kind % 5 == 1;
    if (!alone) {
      entry.identity = in.U8() % 8 != 0 ? FromAlphabet(in, kIdentityAlphabet, 64) : in.String();
      const uint8_t role = in.U8() % 5;
      entry.role = role < 2 ? "caller" : role < 4 ? "admin" : in.String();
      entry.well_formed =
          IsTokenIdentity(entry.identity) && (entry.role == "caller" || entry.role == "admin");
    }
    const uint8_t pick = in.U8();
    if (pick % 8 == 0 && !written.empty()) {
      entry.token = written[in.U8() % written.size()].token;  // given twice
    } else if (pick % 8 == 1) {
      entry.token = in.String();
      entry.well_formed = false;
    } else {
      entry.token = FromAlphabet(in, kTokenAlphabet, 48);
      if (entry.token.rfind("sha256:", 0) == 0) entry.token[0] = 'S';
    }
    if (alone && !entry.token.empty() && entry.token[0] == '#') entry.token[0] = 'T';
    if (!tokens.insert(entry.token).second) twice = true;
    const std::string secret =
        (pick & 16) ? "sha256:" + Hex(Sha256(entry.token), pick & 32) : entry.token;
    std::string line =
        alone ? secret : absl::StrCat(entry.identity, separator(), entry.role, separator(), secret);
    if (pick & 64) line = " \t" + line + " \r";
    absl::StrAppend(&text, line, "\n");
    well_formed = well_formed && entry.well_formed;
    written.push_back(std::move(entry));
  }
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text, "tokens");
  if (!well_formed) return;  // a bad part may still parse; nothing more is promised
  if (written.empty() || twice) {
    Expect(!entries.ok(), "ParseTokenFile: no token, or a token twice, accepted");
    return;
  }
  Expect(entries.ok(), "ParseTokenFile refused a well-formed file: " +
                           std::string(entries.status().message()) + "\n" + text);
  Expect(entries->size() == written.size(), "ParseTokenFile: entries lost");
  CheckEntries(*entries);
  AuthOptions options;
  options.tokens = *entries;
  const bool extra_admin = in.U8() % 2 == 1 && !written.front().identity.empty();
  if (extra_admin) options.admin_identities.push_back(written.front().identity);
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(options, nullptr);
  Expect(auth.ok(), "Authenticator::Create: " + std::string(auth.status().message()));
  for (const WrittenEntry& entry : written) {
    const std::string value = BearerValue(in, entry.token);
    absl::StatusOr<Caller> caller = AuthenticateWith(**auth, &value, "ipv4:10.0.0.1:1");
    const std::string identity = entry.identity.empty() ? "default" : entry.identity;
    const bool admin = entry.identity.empty() || entry.role == "admin" ||
                       (extra_admin && identity == written.front().identity);
    Expect(caller.ok(), "Authenticate refused a token of the file: " + value);
    Expect(caller->identity == identity,
           "Authenticate: identity " + caller->identity + ", the file says " + identity);
    Expect(caller->admin() == admin, "Authenticate: the role of " + identity);
  }
  const std::string stranger = BearerValue(in, in.String());
  if (!tokens.contains(stranger.substr(7))) {
    Expect(absl::IsUnauthenticated(AuthenticateWith(**auth, &stranger, "").status()),
           "Authenticate accepted a token the file does not hold");
  }
  Expect(absl::IsUnauthenticated(AuthenticateWith(**auth, nullptr, "").status()),
         "Authenticate accepted a call without a token");
}

// --- 2, 3, 4: peers and the kernel's socket tables -----------------------------------------

bool Mapped(const TcpEndpoint& endpoint) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(std::begin(kPrefix), std::end(kPrefix), endpoint.address.begin());
}

// The peer string gRPC would write for `endpoint` (ipv6 with its brackets percent-encoded
// when `encoded`).
std::string PeerString(const TcpEndpoint& endpoint, bool encoded) {
  char text[INET6_ADDRSTRLEN] = {};
  if (Mapped(endpoint)) {
    inet_ntop(AF_INET, endpoint.address.data() + 12, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", endpoint.port);
  }
  inet_ntop(AF_INET6, endpoint.address.data(), text, sizeof(text));
  return absl::StrCat("ipv6:", encoded ? "%5B" : "[", text, encoded ? "%5D:" : "]:", endpoint.port);
}

void CheckEndpoint(const TcpEndpoint& endpoint, bool encoded) {
  const bool loopback = Mapped(endpoint)
                            ? endpoint.address[12] == 127
                            : std::all_of(endpoint.address.begin(), endpoint.address.end() - 1,
                                          [](uint8_t b) { return b == 0; }) &&
                                  endpoint.address[15] == 1;
  Expect(endpoint.loopback() == loopback, "TcpEndpoint::loopback: " + PeerString(endpoint, false));
  const std::string written = PeerString(endpoint, encoded);
  std::optional<TcpEndpoint> again = ParsePeerEndpoint(written);
  Expect(again.has_value() && *again == endpoint,
         "ParsePeerEndpoint does not read back " + written);
}

std::optional<uint32_t> ReadId(ByteReader& in) {
  const int64_t value = in.I64();
  if (value < 0) return std::nullopt;
  return static_cast<uint32_t>(value);
}

void Peers(ByteReader& in) {
  const std::string peer = in.String();
  if (std::optional<TcpEndpoint> endpoint = ParsePeerEndpoint(peer)) {
    CheckEndpoint(*endpoint, in.U8() % 2 == 1);
  }
  // A table of a Unix socket listener: Find answers "fd:N" from what was recorded and never
  // looks a TCP peer up (no /proc read).
  PeerTable table(0);
  const int fd = in.Int();
  PeerCredentials recorded;
  recorded.uid = ReadId(in);
  recorded.gid = ReadId(in);
  if (std::optional<uint32_t> pid = ReadId(in)) recorded.pid = static_cast<pid_t>(*pid);
  table.RecordUnix(fd, recorded);
  const PeerCredentials found = table.Find(absl::StrCat("fd:", fd));
  Expect(found.uid == recorded.uid && found.gid == recorded.gid && found.pid == recorded.pid,
         "PeerTable::Find: not what RecordUnix recorded");
  const PeerCredentials other = table.Find(peer);
  if (peer != absl::StrCat("fd:", fd) && peer.rfind("fd:", 0) != 0) {
    Expect(!other.uid && !other.gid && !other.pid, "PeerTable::Find: credentials for " + peer);
  }
  Expect(!other.DebugString().empty(), "PeerCredentials::DebugString: empty");

  // A socket address as accept() gives it.
  sockaddr_storage storage = {};
  const bool v6 = in.U8() % 2 == 1;
  const uint16_t port = static_cast<uint16_t>(in.U8() | (in.U8() << 8));
  uint8_t address[16];
  for (uint8_t& b : address) b = in.U8();
  socklen_t length;
  if (v6) {
    sockaddr_in6 six = {};
    six.sin6_family = AF_INET6;
    six.sin6_port = htons(port);
    std::memcpy(&six.sin6_addr, address, 16);
    std::memcpy(&storage, &six, sizeof(six));
    length = sizeof(six);
  } else {
    sockaddr_in four = {};
    four.sin_family = AF_INET;
    four.sin_port = htons(port);
    std::memcpy(&four.sin_addr, address, 4);
    std::memcpy(&storage, &four, sizeof(four));
    length = sizeof(four);
  }
  std::optional<TcpEndpoint> endpoint =
      EndpointOf(reinterpret_cast<const sockaddr*>(&storage), length);
  Expect(endpoint.has_value() && endpoint->port == port, "EndpointOf: the port");
  CheckEndpoint(*endpoint, in.U8() % 2 == 1);
}

void RawSocketTable(ByteReader& in) {
  const std::string table = in.LongString();
  std::optional<TcpEndpoint> local = ParsePeerEndpoint(in.String());
  const auto port = static_cast<uint16_t>(in.I64());
  if (local) (void)FindSocketOwner(table, *local, port);
}

// An address word as /proc/net/tcp writes it: the 32-bit value in host order, in hex.
std::string Word(const uint8_t* bytes) {
  uint32_t word;
  std::memcpy(&word, bytes, sizeof(word));
  return absl::StrFormat("%08X", word);
}

std::string TableEndpoint(const TcpEndpoint& endpoint, bool as_v6) {
  std::string address;
  if (Mapped(endpoint) && !as_v6) {
    address = Word(endpoint.address.data() + 12);
  } else {
    for (int i = 0; i < 4; ++i) address += Word(endpoint.address.data() + 4 * i);
  }
  return absl::StrFormat("%s:%04X", address, endpoint.port);
}

TcpEndpoint ReadEndpoint(ByteReader& in) {
  TcpEndpoint endpoint;
  if (in.U8() % 2 == 0) {
    endpoint.address[10] = endpoint.address[11] = 0xff;
    for (int i = 12; i < 16; ++i) endpoint.address[i] = in.U8();
  } else {
    for (uint8_t& b : endpoint.address) b = in.U8();
  }
  endpoint.port = static_cast<uint16_t>(in.U8() | (in.U8() << 8));
  return endpoint;
}

void BuiltSocketTable(ByteReader& in) {
  const TcpEndpoint endpoints[2] = {ReadEndpoint(in), ReadEndpoint(in)};
  const uint16_t ports[2] = {static_cast<uint16_t>(in.U8() | (in.U8() << 8)),
                             static_cast<uint16_t>(in.U8() | (in.U8() << 8))};
  static constexpr uint32_t kStates[] = {0x01, 0x06, 0x0A, 0x08};
  std::string table =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n";
  std::set<uid_t> owners;  // of the live entries of endpoints[0] to ports[0]
  const int n = in.U8() % 10;
  for (int i = 0; i < n; ++i) {
    const uint8_t pick = in.U8();
    const TcpEndpoint& local = endpoints[pick % 2];
    TcpEndpoint remote = ReadEndpoint(in);
    remote.port = ports[(pick >> 1) % 2];
    const uint32_t state = kStates[(pick >> 2) % 4];
    const auto uid = static_cast<uid_t>(in.U8() % 4 == 0 ? in.I64() & 0xffffffff : in.U8() % 3);
    const bool as_v6 = (pick >> 4) % 2 == 1;
    absl::StrAppendFormat(&table,
                          "%4d: %s %s %02X 00000000:00000000 00:00000000 00000000 %5u        0 "
                          "%d 1 0000000000000000 20 4 30 10 -1\n",
                          i, TableEndpoint(local, as_v6), TableEndpoint(remote, as_v6), state, uid,
                          1000 + i);
    if (local == endpoints[0] && remote.port == ports[0] && state != 0x06 && state != 0x0A) {
      owners.insert(uid);
    }
  }
  std::optional<uid_t> owner = FindSocketOwner(table, endpoints[0], ports[0]);
  if (owners.size() == 1) {
    Expect(owner == *owners.begin(), "FindSocketOwner: not the one owner listed\n" + table);
  } else {
    Expect(!owner.has_value(),
           "FindSocketOwner: an owner for none, or for owners that differ\n" + table);
  }
}

// --- 5: --listen ---------------------------------------------------------------------------

// The address written back: "[host]:port" (brackets take every host), "unix://PATH",
// "unix-abstract:NAME".
std::string Written(const ListenAddress& address) {
  switch (address.kind) {
    case ListenAddress::Kind::kUnix:
      return "unix://" + address.path;
    case ListenAddress::Kind::kUnixAbstract:
      return "unix-abstract:" + address.path;
    default:
      return absl::StrCat("[", address.host, "]:", address.port);
  }
}

void Listen(ByteReader& in) {
  const std::string text = in.Rest();
  absl::StatusOr<ListenAddress> address = ParseListenAddress(text);
  if (!address.ok()) {
    Expect(absl::IsInvalidArgument(address.status()), "ParseListenAddress: not InvalidArgument");
    return;
  }
  if (address->kind == ListenAddress::Kind::kTcp) {
    Expect(!address->host.empty() && address->port >= 0 && address->port <= 65535,
           "ParseListenAddress: host or port of " + text);
    Expect(address->host.find("]:") == std::string::npos,
           "ParseListenAddress: host " + address->host);
  } else {
    Expect(!address->path.empty(), "ParseListenAddress: an empty path from " + text);
  }
  const std::string written = Written(*address);
  absl::StatusOr<ListenAddress> again = ParseListenAddress(written);
  Expect(again.ok() && again->kind == address->kind && again->host == address->host &&
             again->port == address->port && again->path == address->path,
         "ParseListenAddress does not read back '" + written + "' (from '" + text + "')");
}

// --- 6, 7: region names, keys and object access --------------------------------------------

void NamesAndKeys(ByteReader& in) {
  const uint8_t pick = in.U8();
  std::string text = in.Rest();
  if (pick % 4 == 1) text = "/" + text;  // most keys start right
  if (pick % 4 == 2) text.resize(std::min<size_t>(text.size(), 128));
  auto printable = [](char c, bool space) { return (c > ' ' && c <= '~') || (space && c == ' '); };

  const absl::Status name = CheckRegionName(text);
  const bool name_ok =
      !text.empty() && text.size() <= kMaxRegionNameBytes &&
      std::all_of(text.begin(), text.end(), [&](char c) { return printable(c, false); });
  Expect(name.ok() == name_ok, "CheckRegionName against its rule: " + Quoted(text));
  if (!name.ok()) {
    Expect(absl::IsInvalidArgument(name), "CheckRegionName: not InvalidArgument");
    ExpectClientMessage(name, "CheckRegionName");
  }

  const absl::Status key = CheckObjectKey(text);
  const std::string_view rest =
      text.empty() ? std::string_view() : std::string_view(text).substr(1);
  const bool key_ok =
      !text.empty() && text[0] == '/' && !rest.empty() && text.size() <= kMaxObjectKeyBytes &&
      rest != "." && rest != ".." &&
      std::all_of(rest.begin(), rest.end(), [&](char c) { return printable(c, true) && c != '/'; });
  Expect(key.ok() == key_ok, "CheckObjectKey against its rule: " + Quoted(text));
  if (key.ok()) {
    Expect(text[0] == '/' && text.find('\0') == std::string::npos,
           "CheckObjectKey accepted a key with a NUL or without its '/'");
  } else {
    Expect(absl::IsInvalidArgument(key), "CheckObjectKey: not InvalidArgument");
    ExpectClientMessage(key, "CheckObjectKey");
  }

  const std::string quoted = Quoted(text);
  Expect(quoted.size() <= 2 + 4 * 64 + 3, "Quoted: longer than 64 escaped bytes");
  Expect(std::all_of(quoted.begin(), quoted.end(), [](char c) { return c >= ' ' && c <= '~'; }),
         "Quoted: bytes that are not printable ASCII");
}

void ObjectAccess(ByteReader& in) {
  const auto owner = static_cast<uid_t>(in.I64());
  const auto group = static_cast<gid_t>(in.I64());
  const auto mode = static_cast<mode_t>(in.I64() & 07777);
  PeerCredentials peer;
  const uint8_t flags = in.U8();
  // Mostly the owner, the group or root, so that each branch of the rule is met.
  auto id = [&](uint32_t same) -> uint32_t {
    const uint8_t pick = in.U8() % 4;
    return pick == 0 ? same : pick == 1 ? 0 : static_cast<uint32_t>(in.I64());
  };
  if (flags & 1) peer.uid = id(owner);
  if (flags & 2) peer.gid = id(group);
  if (flags & 4) peer.pid = static_cast<pid_t>(in.Int());
  const absl::Status status = CheckObjectAccess(owner, group, mode, peer, "region 'r'");
  mode_t needed = S_IROTH | S_IWOTH;
  if (peer.uid && *peer.uid == owner) {
    needed = S_IRUSR | S_IWUSR;
  } else if (peer.uid && peer.gid && *peer.gid == group) {
    needed = S_IRGRP | S_IWGRP;
  }
  const bool allowed = (peer.uid && *peer.uid == 0) || (mode & needed) == needed;
  Expect(status.ok() == allowed,
         absl::StrFormat("CheckObjectAccess: owner %u group %u mode 0%o, caller %s: %s", owner,
                         group, mode, peer.DebugString(), status.ToString()));
  if (!status.ok()) {
    Expect(absl::IsPermissionDenied(status), "CheckObjectAccess: not PermissionDenied");
    ExpectClientMessage(status, "CheckObjectAccess");
    Expect(status.message().find(absl::StrFormat("mode 0%03o", mode & 0777)) != std::string::npos,
           "CheckObjectAccess: the message does not show the mode");
  }
}

// --- 8: quotas -------------------------------------------------------------------------------

void Quotas(ByteReader& in) {
  static constexpr double kRates[] = {0, 0.5, 1, 3, 100, 1e6};
  QuotaOptions quota;
  quota.requests_per_second = kRates[in.U8() % 6];
  quota.request_burst = in.U8() % 4 == 0 ? 0 : in.U8() % 50;
  quota.inflight_bytes = in.U8() % 3 == 0 ? 0 : in.I64() & 0xffffff;
  quota.max_labels = in.U8() % 8;
  std::vector<std::string> known = {"known"};
  int refusals = 0;
  Tenants tenants(quota, known, [&](const std::string&, const char*) { ++refusals; });

  // The bucket is full when the tenant is made, between `made` and `start`.
  const Tenant::Clock::time_point made = Tenant::Clock::now();
  const std::shared_ptr<Tenant> tenant = tenants.Of("t");
  const Tenant::Clock::time_point start = Tenant::Clock::now();
  const double made_s = std::chrono::duration<double>(start - made).count();
  const double burst =
      quota.request_burst > 0 ? quota.request_burst : std::max(1.0, quota.requests_per_second);
  int64_t elapsed_us = 0, admitted = 0, held = 0;
  for (int n = in.U8() % 64; n > 0; --n) {
    const uint8_t op = in.U8();
    if (op % 3 == 0) {
      elapsed_us += in.I64() & 0xfffff;
      const absl::Status taken = tenant->TakeRequest(start + std::chrono::microseconds(elapsed_us));
      if (taken.ok()) {
        ++admitted;
      } else {
        Expect(quota.requests_per_second > 0 && absl::IsResourceExhausted(taken),
               "TakeRequest: refused without a rate, or not ResourceExhausted");
        Expect(taken.message().find("identity 't'") != std::string::npos,
               "TakeRequest: the refusal does not name the identity");
      }
      const double allowed =
          burst + quota.requests_per_second * (static_cast<double>(elapsed_us) * 1e-6 + made_s);
      Expect(quota.requests_per_second <= 0 || static_cast<double>(admitted) <= allowed + 1e-9,
             absl::StrCat("TakeRequest admitted ", admitted, " in ", elapsed_us, " us at rate ",
                          quota.requests_per_second, " burst ", burst));
    } else if (op % 3 == 1) {
      const int64_t bytes = in.I64() & 0xffffff;
      const absl::Status hold = tenant->Hold(bytes, "the input");
      if (hold.ok()) {
        held += bytes;
      } else {
        Expect(quota.inflight_bytes > 0 && bytes > quota.inflight_bytes - held,
               "Hold refused bytes within the quota");
        Expect(absl::IsResourceExhausted(hold), "Hold: not ResourceExhausted");
      }
      Expect(tenant->held() == held, "Tenant::held is not what Hold took");
      Expect(quota.inflight_bytes <= 0 || held <= quota.inflight_bytes,
             "Tenant: more bytes held than its quota");
    } else if (held > 0) {
      const int64_t bytes = std::min<int64_t>(held, in.I64() & 0xffffff);
      tenant->Release(bytes);
      held -= bytes;
      Expect(tenant->held() == held, "Tenant::held after Release");
    }
  }
  // Labels: the known ones, then at most max_labels others, the rest "other".
  for (int n = in.U8() % 16; n > 0; --n) (void)tenants.Of(in.String());
  const std::vector<std::string> labels = tenants.Labels();
  Expect(labels.size() <= known.size() + static_cast<size_t>(std::max(quota.max_labels, 0)),
         "Tenants: more labels than max_labels");
  Expect(tenants.Of("known")->label() == "known", "Tenants: a known identity lost its label");
}

// --- 9: a batch's accounting ----------------------------------------------------------------

// What a CPU-only server holds to plan calls (as request_fuzz's).
struct Engine {
  KernelRegistry registry;
  ConfigCache memory{64};
  ConfigSelectorChain chain{&memory, /*store=*/nullptr};
  std::unique_ptr<Executor> executor;
  WorkerPool pool{{-1}};
  ServerOptions options;

  Engine() {
    if (!RegisterBuiltinKernels(&registry).ok()) std::abort();
    executor = std::make_unique<Executor>(&registry, &chain, std::vector<DeviceInfo>{});
  }
};

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? INT64_MAX : sum;
}

void Batch(ByteReader& in) {
  static Engine* const engine = new Engine();
  const std::string bytes = in.Rest();
  v1::ExecuteBatchRequest request;
  if (!request.ParseFromString(bytes) || request.items().empty()) return;
  absl::StatusOr<CallParams> params = ParamsOf(request);
  if (!params.ok()) return;
  absl::StatusOr<CallPlan> plan = PlanCall(*engine->executor, engine->pool, *params);
  if (!plan.ok()) return;
  const int count = request.items_size();
  BatchItems items = TakeBatchItems(&request, plan->kernel->schema());
  Expect(items.status.size() == static_cast<size_t>(count) &&
             items.inputs.size() == items.index.size(),
         "TakeBatchItems: the items do not add up");
  int64_t tensor_bytes = 0;
  size_t ok = 0;
  for (size_t i = 0; i < items.status.size(); ++i) {
    const bool runs = ok < items.index.size() && items.index[ok] == i;
    Expect(items.status[i].ok() == runs, "TakeBatchItems: status and index disagree");
    if (runs) tensor_bytes += TensorBytes(items.inputs[ok++]);
  }
  Expect(ok == items.index.size() && tensor_bytes == items.bytes,
         "TakeBatchItems: bytes of the items that run");

  // Each item counted as an Execute of its own would count its outputs.
  const int64_t counted = BatchOutputBytes(*plan, items);
  int64_t expected = 0, largest = 0;
  ExecuteOptions options;
  options.platform = params->platform;
  options.device = params->device;
  options.policy = params->policy;
  for (const TensorMap& inputs : items.inputs) {
    absl::StatusOr<CallPlan> own =
        engine->executor->Plan(params->kernel, SpecsOf(inputs), params->params, options);
    if (!own.ok()) continue;  // the item fails alone when the batch runs
    const int64_t outputs = OutputBytes(*own);
    largest = std::max(largest, outputs);
    expected = SaturatingAdd(expected, outputs);
  }
  Expect(counted == expected,
         absl::StrCat("BatchOutputBytes ", counted, ", the items' own outputs ", expected));
  Expect(counted >= largest, "BatchOutputBytes below an item's outputs");
  const absl::Status fits = CheckAnswerFits(engine->options, counted, "the batch's answer", count);
  if (fits.ok()) {
    Expect(counted <= engine->options.max_message_bytes, "CheckAnswerFits: an answer too large");
  } else {
    Expect(absl::IsResourceExhausted(fits) &&
               fits.message().find("--max-message-bytes") != std::string_view::npos,
           "CheckAnswerFits: a refusal without the flag");
  }
}

}  // namespace
}  // namespace kernelserve::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kernelserve::server;  // NOLINT
  kernelserve::fuzz::ByteReader in(data, size);
  switch (in.U8() % 10) {
    case 0:
      RawTokenFile(in);
      break;
    case 1:
      BuiltTokenFile(in);
      break;
    case 2:
      Peers(in);
      break;
    case 3:
      RawSocketTable(in);
      break;
    case 4:
      BuiltSocketTable(in);
      break;
    case 5:
      Listen(in);
      break;
    case 6:
      NamesAndKeys(in);
      break;
    case 7:
      ObjectAccess(in);
      break;
    case 8:
      Quotas(in);
      break;
    default:
      Batch(in);
      break;
  }
  return 0;
}
