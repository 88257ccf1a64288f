// What the benchmarks that call a running server share (kernelserve-shm-bench,
// kernelserve-resident-bench): random f16 inputs, timed calls through the C++ client, medians.
#ifndef KERNELSERVE_BENCH_CLIENT_CALLS_H_
#define KERNELSERVE_BENCH_CLIENT_CALLS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "proto/convert.h"

namespace kernelserve::bench {

// Random f16 values in (-1, 1) of `shape`, on the wire (a cheap generator: 200 MB of them take a
// moment).
inline v1::Tensor RandomF16(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::Empty(DType::kF16, shape);
  auto* bits = static_cast<uint16_t*>(t.data());
  uint32_t state = seed * 2654435761u + 1;
  for (size_t i = 0; i < t.nbytes() / 2; ++i) {
    state = state * 1664525u + 1013904223u;
    // Any sign, exponent 14 or below, any mantissa.
    bits[i] = static_cast<uint16_t>((state >> 16) & 0xbbff);
  }
  v1::Tensor wire;
  PutTensor(std::move(t), &wire);
  return wire;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double Min(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// The client's round trips and the server's timing fields of calls, in microseconds.
struct CallSamples {
  std::vector<double> round_trip_us, recv_us, queue_us, select_us, total_us, kernel_us, h2d_us,
      d2h_us;
  int errors = 0;
  std::string last_error;
};

// One call of `request` through `client`, timed into `samples` (a failure counted).
inline void TimeCall(const Client& client, const std::shared_ptr<const v1::ExecuteRequest>& request,
                     CallSamples* samples) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<RunResult> result = client.Execute(request);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    ++samples->errors;
    samples->last_error = std::string(result.status().message());
    return;
  }
  samples->round_trip_us.push_back(us);
  samples->recv_us.push_back(static_cast<double>(result->timings.recv_us));
  samples->queue_us.push_back(static_cast<double>(result->timings.queue_us));
  samples->select_us.push_back(static_cast<double>(result->timings.select_us));
  samples->total_us.push_back(static_cast<double>(result->timings.total_us));
  samples->kernel_us.push_back(static_cast<double>(result->timings.kernel_us));
  samples->h2d_us.push_back(static_cast<double>(result->timings.h2d_us));
  samples->d2h_us.push_back(static_cast<double>(result->timings.d2h_us));
}

}  // namespace kernelserve::bench

#endif  // KERNELSERVE_BENCH_CLIENT_CALLS_H_
