#include "kernels/runtime/cpu/host_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/synchronization/blocking_counter.h"

namespace kernelserve::cpu {

HostCopier::HostCopier(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

HostCopier::~HostCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& helper : helpers_) helper.join();
}

void HostCopier::HelperLoop() {
  for (;;) {
    std::function<void()> piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](HostCopier* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->pieces_.empty();
          },
          this));
      if (pieces_.empty()) return;  // stopping with nothing left
      piece = std::move(pieces_.front());
      pieces_.pop_front();
    }
    piece();
  }
}

void HostCopier::RunAll(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  absl::BlockingCounter done(static_cast<int>(tasks.size() - 1));
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 1; i < tasks.size(); ++i) {
      pieces_.emplace_back([task = std::move(tasks[i]), &done] {
        task();
        done.DecrementCount();
      });
    }
  }
  tasks[0]();
  // Help with pieces still queued (ours or other callers') instead of sleeping on them.
  for (;;) {
    std::function<void()> other;
    {
      absl::MutexLock lock(&mu_);
      if (pieces_.empty()) break;
      other = std::move(pieces_.front());
      pieces_.pop_front();
    }
    other();
  }
  done.Wait();
}

void HostCopier::Copy(void* dst, const void* src, size_t bytes) {
  const size_t count = bytes < kMinParallelBytes ? 1
                                                 : std::min<size_t>(static_cast<size_t>(threads()),
                                                                    bytes / kMinPieceBytes);
  if (count <= 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  // `count` pieces of ceil(bytes / count) rounded up to 4 KiB: together they cover every byte;
  // the last may be shorter, or empty.
  const size_t piece = ((bytes + count - 1) / count + 4095) & ~size_t{4095};
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < count; ++i) {
    const size_t begin = std::min(bytes, i * piece);
    const size_t n = std::min(bytes, begin + piece) - begin;
    tasks.emplace_back([out, in, begin, n] {
      if (n > 0) std::memcpy(out + begin, in + begin, n);
    });
  }
  RunAll(std::move(tasks));
}

void HostCopier::CopyPieces(const std::vector<CopyPiece>& pieces) {
  size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.bytes;
  const size_t count = total < kMinParallelBytes ? 1
                                                 : std::min<size_t>(static_cast<size_t>(threads()),
                                                                    total / kMinPieceBytes);
  if (count <= 1) {
    for (const CopyPiece& p : pieces) {
      if (p.bytes > 0) std::memcpy(p.dst, p.src, p.bytes);
    }
    return;
  }
  // `count` groups of `share` bytes in order (the last may be shorter), cutting pieces where a
  // group ends.
  const size_t share = (total + count - 1) / count;
  std::vector<std::vector<CopyPiece>> groups(count);
  size_t group = 0, filled = 0;
  for (const CopyPiece& p : pieces) {
    size_t offset = 0;
    while (offset < p.bytes) {
      const size_t take = std::min(p.bytes - offset, share - filled);
      groups[group].push_back(
          {static_cast<char*>(p.dst) + offset, static_cast<const char*>(p.src) + offset, take});
      offset += take;
      filled += take;
      if (filled == share && group + 1 < count) {
        ++group;
        filled = 0;
      }
    }
  }
  std::vector<std::function<void()>> tasks;
  for (std::vector<CopyPiece>& g : groups) {
    tasks.emplace_back([g = std::move(g)] {
      for (const CopyPiece& p : g) std::memcpy(p.dst, p.src, p.bytes);
    });
  }
  RunAll(std::move(tasks));
}

int DefaultHostCopyThreads(unsigned hardware_threads) {
  // Half the hardware threads leaves the rest to gRPC and the workers; past 8 threads the
  // copy is bound by memory bandwidth, not by threads.
  return static_cast<int>(std::clamp<unsigned>(hardware_threads / 2, 1, 8));
}

int HostCopyThreadsFromEnv(const char* value, unsigned hardware_threads) {
  int threads = 0;
  if (value != nullptr && absl::SimpleAtoi(value, &threads) && threads >= 1 && threads <= 64) {
    return threads;
  }
  return DefaultHostCopyThreads(hardware_threads);
}

HostCopier& SharedHostCopier() {
  static HostCopier* const copier = new HostCopier(HostCopyThreadsFromEnv(
      std::getenv("KERNELSERVE_COPY_THREADS"), std::thread::hardware_concurrency()));
  return *copier;
}

}  // namespace kernelserve::cpu
