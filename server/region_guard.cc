#include "server/region_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kernelserve::server {
namespace {

// One watched mapping, [begin, end) in whole pages; begin == 0 = none. The signal handler reads
// begin (acquire) and then end; Watch stores end before begin (release), Reset clears begin
// first.
struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> claimed{false};  // taken by a MappingGuard (begin may not be set yet)
  std::atomic<bool> damaged{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);
static_assert(std::atomic<int>::is_always_lock_free);

Slot g_slots[kMaxGuardedMappings];
std::atomic<int> g_slots_used{0};  // the handler scans [0, g_slots_used)
std::atomic<uintptr_t> g_page_size{0};
// The SIGBUS disposition before the guard's, for faults outside every watched mapping. Written
// once, before the guard's handler is installed.
struct sigaction g_previous = {};

// The action taken before the guard was installed: the previous handler, or the default action
// (restored, so that the faulting access, run again, ends the process with SIGBUS as it would
// have without the guard; a SIGBUS sent by kill is raised again).
void ForwardToPrevious(int signal_number, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(signal_number, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal_number);
    return;
  }
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal_number, &fallback, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(signal_number);
}

// Async-signal-safe: atomics, mmap and sigaction only; no locks, no allocation.
void OnSigbus(int signal_number, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto address = reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr);
  const uintptr_t page_size = g_page_size.load(std::memory_order_relaxed);
  const int used = g_slots_used.load(std::memory_order_acquire);
  for (int i = 0; address != 0 && i < used; ++i) {
    Slot& slot = g_slots[i];
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin) continue;
    const uintptr_t end = slot.end.load(std::memory_order_relaxed);
    if (address >= end) continue;
    // An object shrinks from its end: every page from the faulting one on is past it.
    const uintptr_t page = address & ~(page_size - 1);
    void* patched = mmap(reinterpret_cast<void*>(page), end - page, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (patched == MAP_FAILED) break;
    slot.damaged.store(true, std::memory_order_release);
    errno = saved_errno;
    return;
  }
  errno = saved_errno;
  ForwardToPrevious(signal_number, info, context);
}

// Installs OnSigbus once; the error of that one attempt afterwards.
absl::Status InstallHandler() {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    g_page_size.store(static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), std::memory_order_relaxed);
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, nullptr, &g_previous) != 0 || sigaction(SIGBUS, &action, nullptr) != 0) {
      error = errno;
    }
  });
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("installing the SIGBUS guard of shared memory: ", std::strerror(error)));
}

// Claims a free slot; -1 when every one is taken.
int ClaimSlot() {
  for (int i = 0; i < kMaxGuardedMappings; ++i) {
    bool expected = false;
    if (g_slots[i].claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      int used = g_slots_used.load(std::memory_order_relaxed);
      while (used < i + 1 &&
             !g_slots_used.compare_exchange_weak(used, i + 1, std::memory_order_acq_rel)) {
      }
      return i;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<MappingGuard> MappingGuard::Watch(const void* begin, size_t bytes) {
  if (absl::Status installed = InstallHandler(); !installed.ok()) return installed;
  const int slot = ClaimSlot();
  if (slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server watches ", kMaxGuardedMappings,
                     " shared-memory mappings already (registered regions and unregistered ones "
                     "that calls still hold); unregister regions"));
  }
  const uintptr_t page_size = g_page_size.load(std::memory_order_relaxed);
  const auto first = reinterpret_cast<uintptr_t>(begin) & ~(page_size - 1);
  const uintptr_t last =
      (reinterpret_cast<uintptr_t>(begin) + bytes + page_size - 1) & ~(page_size - 1);
  Slot& entry = g_slots[slot];
  entry.damaged.store(false, std::memory_order_relaxed);
  entry.end.store(last, std::memory_order_relaxed);
  entry.begin.store(first, std::memory_order_release);
  return MappingGuard(slot);
}

MappingGuard& MappingGuard::operator=(MappingGuard&& other) noexcept {
  if (this != &other) {
    Reset();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

void MappingGuard::Reset() {
  if (slot_ < 0) return;
  Slot& entry = g_slots[slot_];
  entry.begin.store(0, std::memory_order_release);
  entry.end.store(0, std::memory_order_relaxed);
  entry.damaged.store(false, std::memory_order_relaxed);
  entry.claimed.store(false, std::memory_order_release);
  slot_ = -1;
}

bool MappingGuard::damaged() const {
  return slot_ >= 0 && g_slots[slot_].damaged.load(std::memory_order_acquire);
}

}  // namespace kernelserve::server
