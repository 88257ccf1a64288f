// The load generator behind `kernelserve bench`: one request sent again and again from N
// threads for a duration, with client latency percentiles and the server's timing breakdown.
#ifndef KERNELSERVE_CLIENT_CLI_BENCH_H_
#define KERNELSERVE_CLIENT_CLI_BENCH_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace kernelserve::cli {

// Options of RunBench. Every field has a default.
struct BenchOptions {
  int concurrency = 1;                          // threads, each with one call in flight
  absl::Duration duration = absl::Seconds(5);   // how long to send
  int64_t max_requests = 0;                     // stop after this many calls; 0 = no limit
  absl::Duration pause = absl::ZeroDuration();  // each thread's wait between its calls
  std::ostream* progress = nullptr;             // borrowed; a progress bar goes here; null = none
};

// Names of the server phases, in the order of BenchReport::server_mean_us.
inline constexpr std::array<const char*, 8> kPhaseNames = {"recv",   "queue",  "select", "h2d",
                                                           "launch", "kernel", "d2h",    "total"};

// The outcome of a run. A value type.
struct BenchReport {
  int64_t ok = 0;                           // calls that succeeded
  int64_t errors = 0;                       // calls that failed
  std::map<std::string, int64_t> failures;  // "CODE: message" -> count
  absl::Status first_error;                 // one of the failures (OK when none)
  absl::Status fatal;     // the first failure that ends a run (EndsTheRun; OK when none); it
                          // ended the run
  double seconds = 0;     // wall time of the run
  double throughput = 0;  // successful calls per second
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;  // client latency
  std::array<double, kPhaseNames.size()>
      server_mean_us{};  // mean of each server phase (kPhaseNames)
};

// Whether a call that failed with `code` may succeed when sent again (UNAVAILABLE,
// RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED): the load, not the request, made it fail.
bool IsRetryable(absl::StatusCode code);

// Whether a failure with `code` ends a run: one that retrying cannot cure (a bad request fails
// every time), and UNAVAILABLE, though retryable: the server is down or went away, and every
// further call would fail at once.
bool EndsTheRun(absl::StatusCode code);

// One call of the load: the server's timings of it, or why it failed. Called from many threads
// at once.
using BenchCall = std::function<absl::StatusOr<ServerTimings>()>;

// Makes `call` from options.concurrency threads until the duration or max_requests ends, or
// until a call fails with a status that ends the run (EndsTheRun): then every thread stops and
// BenchReport::fatal holds it. Other failures (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED) are
// counted.
// REQUIRES: options.concurrency >= 1.
BenchReport RunBench(const BenchCall& call, const BenchOptions& options);

// RunBench of Client::Execute of `request`, shared by the calls (its tensor bytes are sent
// without a copy).
BenchReport RunBench(const Client& client, std::shared_ptr<const v1::ExecuteRequest> request,
                     const BenchOptions& options);

// The p-th percentile (0 < p <= 100) of ascending `sorted` by nearest rank; 0 when empty.
double Percentile(const std::vector<double>& sorted, double p);
// "[#########...........]  45%" with `width` cells; fraction clamped to [0, 1].
std::string ProgressBar(double fraction, int width);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_BENCH_H_
