// SharedMemoryRegistry over real POSIX shared memory: registration and its errors, spans, a
// region that stays mapped for a call that holds it after it is unregistered; regions kept
// apart per identity, the caps, the rules for names and keys, objects that shrink (the size
// check and the SIGBUS guard), the calls counted in use, index inputs copied.
#include "server/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/region_guard.h"
#include "server/region_tensors.h"

namespace kernelserve::server {
namespace {

// A caller on this host: a process of this test's user (as a Unix socket or loopback peer is
// known to the server), which may register the objects the test creates.
Caller Local(Caller caller = Caller()) {
  caller.peer.uid = geteuid();
  return caller;
}
// The anonymous caller of a server without authentication, calling from this host.
const Caller kMe = Local();

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

Caller Identity(std::string name, Role role = Role::kCaller) {
  Caller caller;
  caller.identity = std::move(name);
  caller.role = role;
  return Local(caller);
}

// A shm_open object of `bytes` bytes, byte i being (i + seed) mod 251, removed at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes, int seed = 0)
      : key_(absl::StrCat("/kernelserve-test-", getpid(), "-", counter_++)) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    for (size_t i = 0; i < bytes; ++i) {
      static_cast<char*>(map)[i] = static_cast<char>((i + seed) % 251);
    }
    munmap(map, bytes);
    close(fd);
  }
  ~ShmObject() { shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }
  // Cuts (or grows) the object to `bytes`, as a client may at any time.
  void Resize(size_t bytes) const {
    const int fd = shm_open(key_.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }

 private:
  static inline int counter_ = 0;
  std::string key_;
};

// Who may register an object: whoever could open it for reading and writing, by the kernel's
// rule (owner bits for the owner, group bits for its group, the others' for the rest; root
// always); a caller of unknown uid only an object everyone may read and write.
TEST(SharedMemoryAccessTest, ACallerRegistersOnlyObjectsItCouldOpenItself) {
  PeerCredentials unix_peer;  // SO_PEERCRED: uid, gid and pid
  unix_peer.uid = 1000;
  unix_peer.gid = 1000;
  unix_peer.pid = 42;
  PeerCredentials tcp_peer;  // loopback TCP: the uid alone
  tcp_peer.uid = 1000;
  PeerCredentials root;
  root.uid = 0;
  const PeerCredentials unknown;
  struct Case {
    uid_t owner;
    gid_t group;
    mode_t mode;
    PeerCredentials peer;
    bool allowed;
  };
  const std::vector<Case> cases = {
      {1000, 1000, 0600, unix_peer, true},  {1000, 1000, 0400, unix_peer, false},
      {1000, 1000, 0066, unix_peer, false},  // the owner's bits decide for the owner
      {2000, 1000, 0660, unix_peer, true},  {2000, 1000, 0606, unix_peer, false},
      {2000, 2000, 0606, unix_peer, true},  {2000, 1000, 0660, tcp_peer, false},
      {1000, 5, 0600, tcp_peer, true},      {2000, 2000, 0600, root, true},
      {1000, 1000, 0600, unknown, false},   {1000, 1000, 0664, unknown, false},
      {1000, 1000, 0666, unknown, true},
  };
  for (const Case& c : cases) {
    const absl::Status status = CheckObjectAccess(c.owner, c.group, c.mode, c.peer, "region 'r'");
    EXPECT_EQ(status.ok(), c.allowed) << c.owner << " " << c.group << " " << std::oct << c.mode
                                      << " " << c.peer.DebugString() << ": " << status;
    if (!status.ok()) {
      EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    }
  }
  const absl::Status other_user = CheckObjectAccess(2000, 2000, 0600, unix_peer, "region 'r'");
  EXPECT_NE(other_user.message().find(
                "region 'r': the object (owner uid 2000, group 2000, mode 0600) is not readable "
                "and writable by the caller (uid 1000 gid 1000 pid 42)"),
            std::string::npos)
      << other_user;
  const absl::Status no_uid = CheckObjectAccess(1000, 1000, 0600, unknown, "region 'r'");
  EXPECT_NE(no_uid.message().find("cannot tell which user calls"), std::string::npos) << no_uid;
}

TEST(SharedMemoryRegistryTest, RegistersAndSpansAtAnOffset) {
  ShmObject object(10000);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 4099, 5000).ok());
  absl::StatusOr<RegionSpan> span = registry.Span(kMe, "r", 10, 100, "input 'x'");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->byte_size, 100u);
  EXPECT_EQ(static_cast<unsigned char>(span->data[0]), (4099 + 10) % 251);
  auto listed = registry.List(kMe, "", "");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]->key(), object.key());
  EXPECT_EQ((*listed)[0]->offset(), 4099u);
}

TEST(SharedMemoryRegistryTest, BadRegistrationsGetTheirCodes) {
  ShmObject object(4096);
  SharedMemoryOptions options;
  options.max_bytes = 8192;
  SharedMemoryRegistry registry(options);
  EXPECT_EQ(registry.RegisterSystem(kMe, "a", "/kernelserve-no-such-object", 0, 16).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.RegisterSystem(kMe, "a", object.key(), 4000, 200).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterSystem(kMe, "a", object.key(), 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterSystem(kMe, "", object.key(), 0, 16).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.RegisterSystem(kMe, "a", object.key(), 0, 4096).ok());
  EXPECT_EQ(registry.RegisterSystem(kMe, "a", object.key(), 0, 16).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.RegisterSystem(kMe, "b", object.key(), 0, 4096).ok());
  const absl::Status full = registry.RegisterSystem(kMe, "c", object.key(), 0, 16);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-shared-memory-bytes"), std::string::npos) << full;
  EXPECT_EQ(registry.Unregister(kMe, "", "zz").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry.Unregister(kMe, "", "b").ok());
  EXPECT_TRUE(registry.RegisterSystem(kMe, "c", object.key(), 0, 16).ok());  // room again
  EXPECT_EQ(registry.Span(kMe, "nope", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);
  const absl::Status past = registry.Span(kMe, "a", 4000, 100, "input 'x'").status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("input 'x'"), std::string::npos) << past;
}

TEST(SharedMemoryRegistryTest, OffRefusesRegistrationSayingWhy) {
  ShmObject object(4096);
  SharedMemoryOptions options;
  options.system = false;
  options.off_reason = "--shared-memory=off";
  SharedMemoryRegistry registry(options);
  const absl::Status off = registry.RegisterSystem(kMe, "a", object.key(), 0, 16);
  EXPECT_EQ(off.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(off.message().find("--shared-memory=off"), std::string::npos) << off;
}

TEST(SharedMemoryRegistryTest, ASpanKeepsItsRegionMappedAfterUnregister) {
  ShmObject object(8192);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 0, 8192).ok());
  absl::StatusOr<RegionSpan> span = registry.Span(kMe, "r", 8000, 192, "input 'x'");
  ASSERT_TRUE(span.ok());
  ASSERT_TRUE(registry.Unregister(kMe, "", "").ok());
  EXPECT_EQ(registry.Span(kMe, "r", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);
  // Still mapped: the span holds the region (a read of unmapped memory would crash here).
  for (int i = 0; i < 192; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(span->data[i]), (8000 + i) % 251);
  }
  std::weak_ptr<const SharedRegion> region = span->region;
  span = absl::NotFoundError("released");
  EXPECT_TRUE(region.expired());
}

TEST(SharedMemoryOwnershipTest, IdentitiesNeitherSeeUseRemoveNorShadowEachOthersRegions) {
  ShmObject alices(4096, /*seed=*/0);
  ShmObject bobs(4096, /*seed=*/100);
  SharedMemoryRegistry registry({});
  const Caller alice = Identity("alice");
  const Caller bob = Identity("bob");
  ASSERT_TRUE(registry.RegisterSystem(alice, "r", alices.key(), 0, 4096).ok());

  EXPECT_TRUE(registry.List(bob, "", "")->empty());
  EXPECT_EQ(registry.List(bob, "", "r").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Span(bob, "r", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Unregister(bob, "", "r").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Unregister(bob, "", "").ok());  // Bob's own: none
  for (const char* owner : {"alice", "*"}) {
    const absl::Status listed = registry.List(bob, owner, "").status();
    EXPECT_EQ(listed.code(), absl::StatusCode::kPermissionDenied) << owner;
    EXPECT_NE(listed.message().find("identity 'bob' has the caller role"), std::string::npos)
        << listed;
    EXPECT_EQ(registry.Unregister(bob, owner, "").code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(registry.Unregister(bob, owner, "r").code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(registry.List(alice, "alice", "")->size(), 1u);  // naming oneself is fine

  // Bob's "r" is his own; Alice's calls still resolve to hers.
  ASSERT_TRUE(registry.RegisterSystem(bob, "r", bobs.key(), 0, 4096).ok());
  absl::StatusOr<RegionSpan> hers = registry.Span(alice, "r", 0, 1, "input 'x'");
  absl::StatusOr<RegionSpan> his = registry.Span(bob, "r", 0, 1, "input 'x'");
  ASSERT_TRUE(hers.ok() && his.ok());
  EXPECT_EQ(static_cast<unsigned char>(hers->data[0]), 0);
  EXPECT_EQ(static_cast<unsigned char>(his->data[0]), 100);
  EXPECT_EQ(hers->region->owner(), "alice");
  ASSERT_TRUE(registry.Unregister(bob, "", "").ok());
  EXPECT_TRUE(registry.Span(alice, "r", 0, 1, "input 'x'").ok()) << "Bob removed his own only";
  EXPECT_EQ(registry.Span(bob, "r", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SharedMemoryOwnershipTest, AdminsSeeAndRemoveEveryonesRegionsButResolveTheirOwn) {
  ShmObject object(4096);
  SharedMemoryRegistry registry({});
  const Caller alice = Identity("alice");
  const Caller bob = Identity("bob");
  const Caller admin = Identity("ops", Role::kAdmin);
  ASSERT_TRUE(registry.RegisterSystem(alice, "a", object.key(), 0, 16).ok());
  ASSERT_TRUE(registry.RegisterSystem(bob, "b", object.key(), 0, 16).ok());
  ASSERT_TRUE(registry.RegisterSystem(bob, "a", object.key(), 0, 16).ok());

  EXPECT_TRUE(registry.List(admin, "", "")->empty()) << "\"\" is the admin's own";
  absl::StatusOr<std::vector<std::shared_ptr<const SharedRegion>>> every =
      registry.List(admin, kEveryOwner, "");
  ASSERT_TRUE(every.ok());
  std::vector<std::string> seen;
  for (const auto& region : *every) seen.push_back(region->owner() + "/" + region->name());
  EXPECT_EQ(seen, (std::vector<std::string>{"alice/a", "bob/a", "bob/b"}));
  EXPECT_EQ(registry.List(admin, kEveryOwner, "a")->size(), 2u);
  EXPECT_EQ(registry.List(admin, "bob", "")->size(), 2u);
  EXPECT_EQ(registry.List(admin, "carol", "a").status().code(), absl::StatusCode::kNotFound);
  const absl::Status odd = registry.Unregister(admin, std::string("x\n", 2), "a");
  EXPECT_EQ(odd.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(odd.message().find("of identity 'x\\n'"), std::string::npos) << odd;
  EXPECT_EQ(registry.Span(admin, "a", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(registry.Unregister(admin, "", "").ok());  // the admin's own: none
  EXPECT_EQ(registry.List(admin, kEveryOwner, "")->size(), 3u);
  ASSERT_TRUE(registry.Unregister(admin, "bob", "a").ok());
  EXPECT_TRUE(registry.Span(alice, "a", 0, 1, "input 'x'").ok());
  EXPECT_EQ(registry.Span(bob, "a", 0, 1, "input 'x'").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry.Unregister(admin, kEveryOwner, "").ok());
  EXPECT_TRUE(registry.List(admin, kEveryOwner, "")->empty());
  // The room is given back.
  EXPECT_TRUE(registry.RegisterSystem(alice, "a", object.key(), 0, 16).ok());
}

TEST(SharedMemoryRegistryTest, CapsAndQuotasAreResourceExhaustedNamingTheirFlags) {
  ShmObject object(8192);
  SharedMemoryOptions options;
  options.max_regions = 3;
  options.quota_regions = 2;
  options.quota_bytes = 6000;
  std::vector<std::string> refusals;  // of the identities' own quotas, for the metrics
  options.on_quota_refusal = [&refusals](const std::string& owner, const char* quota) {
    refusals.push_back(owner + ":" + quota);
  };
  SharedMemoryRegistry registry(options);
  const Caller alice = Identity("alice");
  const Caller bob = Identity("bob");
  auto expect_full = [](const absl::Status& status, const std::string& words) {
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_NE(status.message().find(words), std::string::npos) << status;
  };
  ASSERT_TRUE(registry.RegisterSystem(alice, "a", object.key(), 0, 4096).ok());
  expect_full(registry.RegisterSystem(alice, "b", object.key(), 0, 4096),
              "4096 bytes more would pass identity 'alice''s 4096 of "
              "--quota-shared-memory-bytes=6000");
  ASSERT_TRUE(registry.RegisterSystem(alice, "b", object.key(), 0, 1000).ok());
  expect_full(registry.RegisterSystem(alice, "c", object.key(), 0, 16),
              "identity 'alice' holds 2 regions, --quota-shared-memory-regions=2");
  ASSERT_TRUE(registry.RegisterSystem(bob, "a", object.key(), 0, 4096).ok());
  expect_full(registry.RegisterSystem(bob, "b", object.key(), 0, 16),
              "the server holds 3 regions, --max-shared-memory-regions=3");
  ASSERT_TRUE(registry.Unregister(alice, "", "a").ok());
  EXPECT_TRUE(registry.RegisterSystem(bob, "b", object.key(), 0, 16).ok());
  EXPECT_EQ(refusals, (std::vector<std::string>{"alice:shared_memory_bytes", "alice:regions"}));
}

TEST(SharedMemoryRegistryTest, NamesAndKeysFollowTheirRulesAndBadOnesAreNeverEchoedRaw) {
  ShmObject object(4096);
  SharedMemoryRegistry registry({});
  // Printable ASCII and short: what a message may show of client text.
  auto expect_clean = [](const absl::Status& status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_LT(status.message().size(), 512u);
    for (char c : status.message()) ASSERT_TRUE(c >= ' ' && c <= '~') << status;
  };
  const std::vector<std::string> bad_names = {"",
                                              "two words",
                                              std::string("a\0b", 3),
                                              "line\nbreak",
                                              "tab\tab",
                                              "\xE2\x80\x8Fright-to-left",
                                              std::string(129, 'n'),
                                              std::string(1 << 20, 'x')};
  for (const std::string& name : bad_names) {
    const absl::Status status = registry.RegisterSystem(kMe, name, object.key(), 0, 16);
    expect_clean(status);
    EXPECT_NE(status.message().find("expected 1 to 128 printable ASCII characters without spaces"),
              std::string::npos)
        << status;
  }
  const absl::Status nul = CheckRegionName(std::string("a\0b", 3));
  EXPECT_NE(nul.message().find("'a\\000b' (3 bytes)"), std::string::npos) << nul;
  EXPECT_NE(nul.message().find("byte 1 is 0x00"), std::string::npos) << nul;

  const std::vector<std::string> bad_keys = {
      "",
      "no-slash",
      "/",
      "/a/b",
      "/.",
      "/..",
      object.key() + std::string(1, '\0') + "other",  // once cut at the NUL: another object
      "/line\nbreak",
      "/\xE2\x80\x8F",
      "/" + std::string(255, 'k')};
  for (const std::string& key : bad_keys) {
    const absl::Status status = registry.RegisterSystem(kMe, "r", key, 0, 16);
    expect_clean(status);
    EXPECT_NE(status.message().find("expected a POSIX shared-memory name"), std::string::npos)
        << status;
  }
  EXPECT_TRUE(registry.List(kMe, "", "")->empty());
  EXPECT_TRUE(registry.RegisterSystem(kMe, std::string(128, 'n'), object.key(), 0, 16).ok());
  EXPECT_TRUE(registry.RegisterSystem(kMe, "in/put:0-data_#1", object.key(), 0, 16).ok());
  EXPECT_TRUE(CheckObjectKey("/" + std::string(254, 'k')).ok());
  EXPECT_TRUE(CheckObjectKey("/with space").ok());
  // A reference to a name no one could register is NotFound, shown escaped.
  const absl::Status unknown =
      registry.Span(kMe, std::string("bad\nname", 8), 0, 1, "input 'x'").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("'bad\\nname'"), std::string::npos) << unknown;
}

TEST(SharedMemoryGuardTest, ACallIntoAShrunkObjectIsInvalidArgumentNamingTheSizes) {
  ShmObject object(4 * kPage);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), kPage, 3 * kPage).ok());
  absl::StatusOr<RegionSpan> whole = registry.Span(kMe, "r", 0, 3 * kPage, "input 'x'");
  ASSERT_TRUE(whole.ok()) << whole.status();
  CallRegions call;
  call.Add(*whole);
  object.Resize(2 * kPage);  // the registered part keeps its first page
  // Shrunk under a call that never touched the lost part (a GPU's copy into pinned pages
  // would not fault either): its answer is lost all the same.
  EXPECT_EQ(call.CheckIntact().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(registry.Span(kMe, "r", 0, kPage, "input 'x'").ok());
  const absl::Status lost = registry.Span(kMe, "r", kPage, 16, "input 'x'").status();
  EXPECT_EQ(lost.code(), absl::StatusCode::kInvalidArgument);
  const std::string want = absl::StrCat(
      "input 'x': the object of region 'r' (key '", object.key(), "') is ", 2 * kPage,
      " bytes now, and the call needs its bytes [", 2 * kPage, ", ", 2 * kPage + 16, ")");
  EXPECT_NE(lost.message().find(want), std::string::npos) << lost;
  object.Resize(4 * kPage);  // grown back: usable again
  EXPECT_TRUE(registry.Span(kMe, "r", kPage, 16, "input 'x'").ok());
}

TEST(SharedMemoryGuardTest, AFaultPastAShrunkObjectIsCoveredAndMarksTheRegionDamaged) {
  ShmObject object(4 * kPage);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 0, 4 * kPage).ok());
  absl::StatusOr<RegionSpan> span = registry.Span(kMe, "r", 0, 4 * kPage, "input 'x'");
  ASSERT_TRUE(span.ok()) << span.status();
  CallRegions call;
  call.Add(*span);
  EXPECT_TRUE(call.CheckIntact().ok());
  EXPECT_FALSE(span->region->damaged());

  // Shrunk after the call's check: without the guard each access below ends the process.
  object.Resize(kPage);
  volatile char* bytes = span->data;
  EXPECT_EQ(bytes[3 * kPage + 1], 0);  // a read past the end
  bytes[2 * kPage + 5] = 7;            // a write past the end
  EXPECT_EQ(bytes[2 * kPage + 5], 7);
  EXPECT_EQ(static_cast<unsigned char>(bytes[kPage - 1]), (kPage - 1) % 251) << "kept";
  EXPECT_TRUE(span->region->damaged());

  const absl::Status lost = call.CheckIntact();
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(lost.message().find("region 'r'"), std::string::npos) << lost;
  const absl::Status damaged = registry.Span(kMe, "r", 0, 1, "input 'x'").status();
  EXPECT_EQ(damaged.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(damaged.message().find("unregister the region and register it again"),
            std::string::npos)
      << damaged;

  ASSERT_TRUE(registry.Unregister(kMe, "", "r").ok());
  span = absl::NotFoundError("released");
  object.Resize(4 * kPage);
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 0, 4 * kPage).ok());
  EXPECT_TRUE(registry.Span(kMe, "r", 0, 1, "input 'x'").ok()) << "registered again: whole";
}

// Under AddressSanitizer the action the guard hands a foreign SIGBUS to is the sanitizer's: it
// reports the fault ("BUS") and exits with status 1 instead of dying of the signal.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KS_UNDER_ASAN 1
#endif
#endif
#ifdef KS_UNDER_ASAN
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif

// How a process whose SIGBUS went to the action in place before the guard ends.
bool DiedOfItsOwnSigbus(int status) {
  if (kUnderAsan) return WIFEXITED(status) && WEXITSTATUS(status) == 1;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
}

TEST(SharedMemoryGuardDeathTest, ASigbusOutsideEveryRegionKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "fast");
  ShmObject registered(kPage);
  ShmObject other(2 * kPage);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", registered.key(), 0, kPage).ok());  // guarded
  EXPECT_EXIT(
      {
        const int fd = shm_open(other.key().c_str(), O_RDWR, 0);
        auto* bytes = static_cast<volatile char*>(
            mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        (void)!ftruncate(fd, 0);
        (void)bytes[kPage];  // no region's mapping
        _exit(0);
      },
      DiedOfItsOwnSigbus, kUnderAsan ? "AddressSanitizer: BUS" : "");
}

TEST(SharedMemoryGuardTest, TheTableOfWatchedMappingsIsBounded) {
  static char bytes[64];
  std::vector<MappingGuard> guards;
  absl::Status last;
  while (static_cast<int>(guards.size()) <= kMaxGuardedMappings) {
    absl::StatusOr<MappingGuard> guard = MappingGuard::Watch(bytes, sizeof(bytes));
    if (!guard.ok()) {
      last = guard.status();
      break;
    }
    guards.push_back(*std::move(guard));
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_LE(static_cast<int>(guards.size()), kMaxGuardedMappings);
  guards.pop_back();
  EXPECT_TRUE(MappingGuard::Watch(bytes, sizeof(bytes)).ok()) << "a slot let go is reused";
}

TEST(SharedMemoryRegistryTest, InUseCountsTheCallsHoldingARegionNotTheirTensors) {
  ShmObject object(8192);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 0, 8192).ok());
  const std::shared_ptr<const SharedRegion> region = (*registry.List(kMe, "", "r"))[0];
  const TensorSpecMap specs = {
      {"q", {DType::kF32, {16}}}, {"k", {DType::kF32, {16}}}, {"v", {DType::kF32, {16}}}};
  const RegionRefs refs = {{"q", {"r", 0, 64}}, {"k", {"r", 64, 64}}, {"v", {"r", 128, 64}}};
  {
    CallRegions first;
    absl::StatusOr<TensorMap> inputs = InputsFromRegions(&registry, kMe, refs, specs, -1, &first);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    EXPECT_EQ(region->calls(), 1) << "three tensors, one call";
    CallRegions second;
    ASSERT_TRUE(InputsFromRegions(&registry, kMe, refs, specs, -1, &second).ok());
    EXPECT_EQ(region->calls(), 2);
  }
  EXPECT_EQ(region->calls(), 0);
}

TEST(SharedMemoryRegistryTest, IndexInputsAreCopiedAndFloatingInputsReadInPlace) {
  ShmObject object(4096);
  SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem(kMe, "r", object.key(), 0, 4096).ok());
  char* base = registry.Span(kMe, "r", 0, 4096, "test")->data;
  const int32_t cu_seqlens[] = {0, 3, 5};
  std::memcpy(base, cu_seqlens, sizeof(cu_seqlens));
  const float x[] = {1, 2, 3, 4};
  std::memcpy(base + 256, x, sizeof(x));
  const TensorSpecMap specs = {
      {"cu_seqlens", {DType::kI32, {3}}}, {"mask", {DType::kBool, {4}}}, {"x", {DType::kF32, {4}}}};
  const RegionRefs refs = {
      {"cu_seqlens", {"r", 0, 12}}, {"mask", {"r", 512, 4}}, {"x", {"r", 256, 16}}};
  CallRegions held;
  absl::StatusOr<TensorMap> inputs = InputsFromRegions(&registry, kMe, refs, specs, -1, &held);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  const Tensor& cu = inputs->at("cu_seqlens");
  const Tensor& xs = inputs->at("x");
  EXPECT_NE(cu.data(), base);
  EXPECT_NE(inputs->at("mask").data(), base + 512);
  EXPECT_EQ(xs.data(), base + 256) << "read in place";

  // The client rewrites the region after the server checked the call.
  const int32_t rewritten[] = {0, 1000000, 2000000};
  std::memcpy(base, rewritten, sizeof(rewritten));
  const float y = 42;
  std::memcpy(base + 256, &y, sizeof(y));
  EXPECT_EQ(std::memcmp(cu.data(), cu_seqlens, sizeof(cu_seqlens)), 0);
  EXPECT_EQ(static_cast<const float*>(xs.data())[0], 42.0f);
}

}  // namespace
}  // namespace kernelserve::server
