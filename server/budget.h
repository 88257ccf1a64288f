// InflightBudget: caps the request bytes the server holds at once.
#ifndef KERNELSERVE_SERVER_BUDGET_H_
#define KERNELSERVE_SERVER_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace kernelserve::server {

// Counts requests and their bytes from arrival to answer: the bytes a request arrived with
// (taken before they are parsed), any the server makes up for it (Autotune's synthesized
// inputs) and its outputs; then, as bytes alone, a stream's answers until gRPC has written them.
// Thread safety: thread-safe (lock-free).
class InflightBudget {
 public:
  // REQUIRES: max_bytes > 0.
  explicit InflightBudget(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // Takes `bytes`, and one request when `count_request`; false (nothing taken) when the bytes
  // would pass the cap. A request larger than the cap is refused even when nothing else is in
  // flight.
  bool TryAcquire(int64_t bytes, bool count_request = true) {
    int64_t held = bytes_.load(std::memory_order_relaxed);
    do {
      if (bytes > max_bytes_ - held) return false;
    } while (!bytes_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    if (count_request) requests_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Takes `bytes` whatever the cap: memory the server holds already (an answer waiting to be
  // sent), which the requests after it must see. Given back with Release(bytes, 0).
  void Take(int64_t bytes) { bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  // Gives back `bytes` and `requests` taken by TryAcquire (and Take).
  void Release(int64_t bytes, int64_t requests = 1) {
    bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    requests_.fetch_sub(requests, std::memory_order_relaxed);
  }

  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  int64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  int64_t max_bytes() const { return max_bytes_; }

  // Once closed (the server drains), new requests are refused (CallTracker::Hold: UNAVAILABLE)
  // while the requests already held go on.
  void Close() { closed_.store(true, std::memory_order_relaxed); }
  bool closed() const { return closed_.load(std::memory_order_relaxed); }

 private:
  const int64_t max_bytes_;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> requests_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_BUDGET_H_
