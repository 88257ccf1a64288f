// Large host-to-host copies on several threads. One thread's std::memcpy moves 10-11 GB/s on
// the GPU hosts we measure, several threads 2-3x that; the CUDA platform stages every upload
// and download through pinned memory, so this copy bounds how fast a request reaches the GPU.
#ifndef KERNELSERVE_KERNELS_RUNTIME_CPU_HOST_COPY_H_
#define KERNELSERVE_KERNELS_RUNTIME_CPU_HOST_COPY_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/scatter_copy.h"

namespace kernelserve::cpu {

// A fixed set of helper threads that split large copies among themselves and the caller.
// Thread safety: Copy may be called from many threads at once; each call waits only for its
// own pieces, and the caller copies pieces itself, so a call never waits on an idle queue.
class HostCopier {
 public:
  // Copies of fewer bytes than this run on the caller alone: waking helpers costs more.
  static constexpr size_t kMinParallelBytes = size_t{4} << 20;
  // Pieces are at least this large.
  static constexpr size_t kMinPieceBytes = size_t{1} << 20;

  // `threads` >= 1 copying threads in all, the caller included (threads - 1 helpers).
  explicit HostCopier(int threads);
  // Joins the helpers. REQUIRES: no Copy in progress.
  ~HostCopier();
  HostCopier(const HostCopier&) = delete;
  HostCopier& operator=(const HostCopier&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // memcpy(dst, src, bytes), split over the threads. REQUIRES: the ranges do not overlap.
  void Copy(void* dst, const void* src, size_t bytes);
  // Every piece, the bytes of all of them split evenly over the threads (pieces are cut where
  // needed). REQUIRES: no two ranges overlap.
  void CopyPieces(const std::vector<CopyPiece>& pieces);

 private:
  void HelperLoop();
  // Runs tasks[1..] on the helpers and tasks[0] on the caller, which then helps with queued
  // tasks; returns when all are done.
  void RunAll(std::vector<std::function<void()>> tasks);

  absl::Mutex mu_;
  std::deque<std::function<void()>> pieces_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

// The process's copier, made on first use with HostCopyThreadsFromEnv(
// $KERNELSERVE_COPY_THREADS, hardware threads) threads.
HostCopier& SharedHostCopier();

// min(8, hardware_threads / 2), at least 1 (0 = unknown). Pure, for tests.
int DefaultHostCopyThreads(unsigned hardware_threads);
// `value` when it is a number in [1, 64], else DefaultHostCopyThreads(hardware_threads).
int HostCopyThreadsFromEnv(const char* value, unsigned hardware_threads);

}  // namespace kernelserve::cpu

#endif  // KERNELSERVE_KERNELS_RUNTIME_CPU_HOST_COPY_H_
