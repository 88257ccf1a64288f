// Autotuning: time every candidate config on one prepared call and keep the fastest one whose
// output matches the heuristic config's output.
#ifndef KERNELSERVE_CORE_TUNER_H_
#define KERNELSERVE_CORE_TUNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/kernel.h"
#include "core/kernel_config.h"

namespace kernelserve {

// Runs `launch` `warmup` times untimed, then `iters` times, and returns the median of the
// seconds each timed launch reports. The first failing launch's status is returned.
// REQUIRES: iters >= 1.
absl::StatusOr<double> Benchmark(const std::function<absl::StatusOr<double>()>& launch, int warmup,
                                 int iters);

// Largest relative error ||out - ref|| / ||ref|| (over all outputs) a candidate may have and
// still count as the same function, for outputs of `dtype`.
double MatchTolerance(DType dtype);

// Where a tuning run stands, after the heuristic's reference run and after each candidate.
// A value type.
struct TuneProgress {
  int done = 0;               // candidates run so far (timed, or failed on their own)
  int total = 0;              // candidates in all
  double best_seconds = 0.0;  // the fastest matching candidate so far; 0 = none yet
  double elapsed_seconds = 0.0;
};

// Options of one tuning run. Every field has a default.
struct TuneOptions {
  int warmup = 1;  // untimed launches per candidate
  int iters = 5;   // timed launches per candidate
  // From the run's start (the reference run included): once spent, no further candidate is
  // started (the one running finishes) and the rest are skipped. Infinite = none.
  absl::Duration time_budget = absl::Seconds(30);
  // Checked before every launch; a non-OK status ends the tuning with that status (the
  // caller's deadline passed or it cancelled). Empty = never.
  std::function<absl::Status()> interrupt;
  // Called on the tuning thread once the reference run is done (done = 0) and after each
  // candidate that runs; it must not block for long. Empty = not reported.
  std::function<void(const TuneProgress&)> progress;
};

// How one candidate fared. A value type.
struct CandidateResult {
  KernelConfig config;
  absl::Status status;          // why it was rejected (launch error, mismatch, budget)
  double median_seconds = 0.0;  // kernel + launch (host queuing) time; valid when status.ok()
};

// The outcome of a tuning run. A value type.
struct TuneReport {
  KernelConfig best;                        // the winner, or the heuristic when all failed
  double best_seconds = 0.0;                // 0 when all failed
  bool all_failed = false;                  // true: `best` is the heuristic, untimed
  std::vector<CandidateResult> candidates;  // in the order given
  double elapsed_seconds = 0.0;
  int candidates_run = 0;       // those the budget let run (timed, or failed on their own)
  bool budget_reached = false;  // the time budget skipped the others (DEADLINE_EXCEEDED each)
};

// Tunes on `run`: launches `heuristic` once as the reference output, then each candidate
// (warmup + iters); a candidate wins only if its output matches the reference within
// MatchTolerance and it is the fastest (ties: higher priority, then earlier). Candidates that
// fail keep their error; those the time budget skips are DeadlineExceeded and the report says
// the budget was reached. If all fail (or none ran), the report says so and names the
// heuristic as best.
// Errors only when the heuristic itself cannot run (its status is returned), or when
// options.interrupt stops the tuning (its status is returned; nothing is chosen).
absl::StatusOr<TuneReport> Autotune(PreparedRun& run, const KernelConfig& heuristic,
                                    const std::vector<KernelConfig>& candidates,
                                    const TuneOptions& options);

// Relative error over all tensors of `actual` against `reference` (same names, sizes); +inf
// when a name or size differs or any value is NaN.
double OutputsRelativeError(const TensorMap& actual, const TensorMap& reference);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_TUNER_H_
